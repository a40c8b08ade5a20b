"""Record, replay and explain: on recordings of this VM (tests/data, made by
tests/support/incident.py: the incident reproduced for real, and a busy healthy node)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, cast

import pytest

from guardian.actions.systemd import SystemdUnit, UnitParams
from guardian.core.durations import format_duration
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime import recording
from guardian.runtime.recording import RecordingError, read
from guardian.runtime.replay import replay
from tests.support.checkout import DATA, RULES
from tests.support.cli import guardian
from tests.support.wait import wait_until

INCIDENT = DATA / "incident.rec"
CHAIN = DATA / "chain.rec"
REPLAY_GOLDEN = DATA / "golden" / "replay-chain.txt"
HEALTHY = DATA / "healthy.rec"


def shipped(rec_path: Path) -> tuple[object, object]:
    rec = read(rec_path)
    rules = load_rules([RULES], catalogue={**default_registry().catalogue(), **rec.catalogue})
    return rec, rules


def test_the_incident_fires_the_dying_memcg_rule_at_the_right_time() -> None:
    rec, rules = shipped(INCIDENT)
    r = replay(rec, rules)  # type: ignore[arg-type]
    snaps = rec.snapshots  # type: ignore[attr-defined]
    # when the condition first held, computed here from the raw recording
    first = next(s for s in snaps if s.values["memcg.dying"] > 10000
                 and s.values["memcg.dying"] > 20 * s.values["memcg.live"])
    fire_at = next(s.time for s in snaps if s.time >= first.time + 300)
    mine = [d for d in r.decisions if d.rule == "dying-memcgs"]
    assert [(d.kind, d.time) for d in mine[:2]] == [("pending", first.time),
                                                    ("firing", fire_at)]
    firing = mine[1]
    assert [a.use for a in firing.actions] == ["log", "systemd.unit", "memcg.release"]
    # the plan of the first remediation, from the recorded snapshot: stop the unit
    at = next(s for s in snaps if s.time == fire_at)
    unit = next(a for a in rules.by_name("dying-memcgs").actions  # type: ignore[attr-defined]
                if a.spec.use == "systemd.unit")
    plan = unit.action.plan(ActionContext("dying-memcgs", at, Host(), dry_run=True))
    assert plan.data["units"] == ["ecs.service"]
    assert plan.steps[0].change.startswith("systemctl stop ecs.service (")
    # the crash loop itself was visible too
    assert any(d.rule == "unit-crashloop" and d.kind == "firing" for d in r.decisions)


def test_a_busy_healthy_node_yields_no_decision() -> None:
    rec, rules = shipped(HEALTHY)
    assert len(rec.snapshots) >= 60  # type: ignore[attr-defined]
    r = replay(rec, rules)  # type: ignore[arg-type]
    assert r.decisions == []
    busy = [s for s in rec.snapshots  # type: ignore[attr-defined]
            if isinstance(s.values.get("cpu.core.user_pct"), dict)
            and max(s.values["cpu.core.user_pct"].values()) > 50]
    assert busy, "the healthy recording should show a busy CPU"


def test_replay_is_deterministic_byte_for_byte() -> None:
    a = guardian("replay", str(INCIDENT), "--rules", str(RULES))
    b = guardian("replay", str(INCIDENT), "--rules", str(RULES))
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout and "dying-memcgs" in a.stdout
    assert "would run: systemd.unit" in a.stdout
    j1 = guardian("replay", str(INCIDENT), "--rules", str(RULES), "--json")
    assert j1.stdout == guardian("replay", str(INCIDENT), "--rules", str(RULES),
                                 "--json").stdout


def test_replay_text_is_the_golden_file_with_durations_for_people() -> None:
    """Before: `+6m15.018s`, `+10m35.046s` and `every 5.0s`: seconds no one reads."""
    out = guardian("replay", str(CHAIN), "--rules", str(RULES))
    assert out.returncode == 0, out.stderr
    if os.environ.get("GUARDIAN_GOLDEN_UPDATE"):
        REPLAY_GOLDEN.write_text(out.stdout)
    assert out.stdout == REPLAY_GOLDEN.read_text()
    assert out.stdout.startswith("recording of vm (kernel 6.18.44-fc-v1147), 145 snapshots "
                                 "every 5s over 12m; 17 decision(s)\n")
    assert "   +6m15s  dying-memcgs           firing     memcg.dying: 11547 cgroups; " \
           "20 * memcg.live: 80 cgroups\n" in out.stdout  # aligned; text, not JSON
    # what the condition compared, as run --once says it: the delta, not the signal
    # (before: `dying-memcgs-climbing  firing     memcg.dying 6944 cgroups`)
    assert "  +10m15s  dying-memcgs-climbing  firing     delta(memcg.dying, \"30m\"): " \
           "6900 cgroups\n" in out.stdout
    # of an `or`, only the comparison that holds (before: all three, two of them 0)
    assert "firing     increase(kmsg.matches{pattern=\"ena_tx_paused\"}, \"5m\"): " \
           "1 line\n" in out.stdout
    assert not re.search(r"\d\.\d+s\b", out.stdout)


def test_a_rule_without_value_the_whole_recording_is_named_blind() -> None:
    """Before: `0 decision(s)` and nothing about the rules that had no value all along
    (healthy.rec was recorded on a host without systemd: unit-crashloop never had one)."""
    out = guardian("replay", str(DATA / "healthy.rec"), "--rules", str(RULES))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("; 0 decision(s)")
    whole = next(line for line in lines if line.startswith("blind the whole time ("))
    assert "no value in any of its 91 snapshots" in whole and "unit-crashloop" in whole
    as_json = json.loads(guardian("replay", str(DATA / "healthy.rec"), "--rules", str(RULES),
                                  "--json").stdout)
    assert as_json["data"]["blind"]["unit-crashloop"] == 91


def test_a_truncated_recording_replays_up_to_the_damage(tmp_path: Path) -> None:
    raw = INCIDENT.read_bytes()
    cut = tmp_path / "cut.rec"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    rec = read(cut)
    assert 0 < len(rec.snapshots) < len(read(INCIDENT).snapshots)
    assert rec.damage.startswith("damaged at line")
    out = guardian("replay", str(cut), "--rules", str(RULES))
    assert out.returncode == 1 and "damaged at line" in out.stderr
    assert "replaying what came before" in out.stderr and "snapshots every" in out.stdout


def test_a_corrupt_recording_stops_at_the_damage(tmp_path: Path) -> None:
    raw = bytearray(INCIDENT.read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 64] = b"\xff" * 64
    bad = tmp_path / "bad.rec"
    bad.write_bytes(bytes(raw))
    rec = read(bad)
    assert rec.damage and 0 < len(rec.snapshots) < len(read(INCIDENT).snapshots)


def test_a_newer_format_is_refused_and_junk_is_not_a_recording(tmp_path: Path) -> None:
    newer = tmp_path / "newer.rec"
    with gzip.open(newer, "wt") as f:
        f.write(json.dumps({"format": "guardian-recording", "version": 99}) + "\n")
    with pytest.raises(RecordingError, match="version 99 is newer than this guardian"):
        read(newer)
    out = guardian("replay", str(newer), "--rules", str(RULES))
    assert out.returncode == 2 and "upgrade guardian" in out.stderr
    junk = tmp_path / "junk.rec"
    junk.write_text("hello\n")
    with pytest.raises(RecordingError, match="not a readable recording"):
        read(junk)


def test_explain_at_a_point_of_the_recording() -> None:
    rec = read(INCIDENT)
    first = next(s for s in rec.snapshots if cast(float, s.values["memcg.dying"]) > 10000)
    later = next(s for s in rec.snapshots if s.time >= first.time + 60)
    out = guardian("explain", "dying-memcgs", "--rules", str(RULES), "--recording",
                   str(INCIDENT), "--at", f"{later.time}s")
    assert out.returncode == 0, out.stderr
    held = later.time - first.time
    assert f"dying-memcgs: PENDING: holds for {format_duration(round(held))}; fires in " \
        f"{format_duration(round(300 - held))} (for = 5m)\n" in out.stdout, out.stdout
    assert "memcg.dying > 10000  =  true" in out.stdout
    assert "its actions: log" in out.stdout and "systemd.unit" in out.stdout
    early = guardian("explain", "dying-memcgs", "--rules", str(RULES), "--recording",
                     str(INCIDENT), "--at", "0s", "--json")
    doc = json.loads(early.stdout)["data"]
    assert doc["state"].startswith("INACTIVE") and doc["condition"]["value"] == "false"


def test_explain_names_the_missing_signal(tmp_path: Path) -> None:
    out = guardian("explain", "unit-crashloop", "--rules", str(RULES), "--recording",
                   str(HEALTHY))
    assert "UNKNOWN" in out.stdout and "systemd.unit_restarts_recent" in out.stdout


def test_plot_draws_a_png(tmp_path: Path) -> None:
    png = tmp_path / "incident.png"
    out = guardian("replay", str(INCIDENT), "--rules", str(RULES), "--plot", str(png))
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_record_writes_a_readable_recording_and_survives_a_kill(tmp_path: Path) -> None:
    out = tmp_path / "live.rec"
    proc = subprocess.Popen([sys.executable, "-m", "guardian", "record", "-o", str(out),
                             "--interval", "0.2s", "--duration", "1h"],
                            stderr=subprocess.PIPE, text=True)
    def snapshots_so_far() -> int:
        try:
            return len(read(out).snapshots)
        except (FileNotFoundError, RecordingError):  # not even the header flushed yet
            return 0

    wait_until(lambda: snapshots_so_far() >= 5, "five snapshots recorded", every=0.2)
    proc.kill()  # no chance to close the gzip stream
    proc.wait(timeout=10)
    rec = read(out)
    assert len(rec.snapshots) >= 5 and "processes.total" in rec.snapshots[0].values
    assert "cut off" in rec.damage  # killed: no end of stream, said, nothing lost before
    assert rec.header["sources"] and rec.header["host"]
    assert proc.stderr is not None and "recorded " in proc.stderr.read()


def test_systemd_unit_plan_is_pure_on_a_recorded_snapshot() -> None:
    rec = read(INCIDENT)
    last = rec.snapshots[-1]
    act = SystemdUnit(UnitParams(allow=["kubelet*"]))
    plan = act.plan(ActionContext("r", last, Host(), dry_run=True))
    assert plan.data["units"] == [] and plan.note == "no unit matches: nothing to do"


def _recording(path: Path, *lines: str | bytes) -> Path:
    head = read(HEALTHY).header
    with gzip.open(path, "wb") as f:
        f.write(json.dumps(head).encode() + b"\n")
        for line in lines:
            f.write(line if isinstance(line, bytes) else line.encode())
    return path


@pytest.mark.parametrize(("record", "why"), [
    ('{"t": 1, "v": [1, 2]}\n', "AttributeError"),  # values a list, not a table
    ('{"t": 1, "v": {"memcg.dying": ' + "9" * 400 + "}}\n", "OverflowError"),
    ("[" * 100_000 + "]" * 100_000 + "\n", "RecursionError"),
], ids=["values-a-list", "a-400-digit-number", "lists-100000-deep"])
def test_a_malformed_recording_is_damaged_at_its_line_never_a_traceback(
        tmp_path: Path, record: str, why: str) -> None:
    """Before: tracebacks; now "damaged at line N", and what came before replays."""
    path = _recording(tmp_path / "bad.rec", '{"t": 0, "v": {}}\n', record)
    rec = read(path)
    assert rec.damage.startswith("damaged at line 3 (after 1 snapshots)"), rec.damage
    assert why in rec.damage or why == "RecursionError"  # json: "maximum recursion depth"
    out = guardian("replay", str(path), "--rules", str(RULES))
    assert "Traceback" not in out.stderr and "damaged at line 3" in out.stderr


def test_a_header_whose_signals_are_not_specs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.rec"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"format": "guardian-recording", "version": 1,
                            "signals": ["memcg.dying"]}) + "\n")
    out = guardian("replay", str(path), "--rules", str(RULES))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "damaged at line 1" in out.stderr


def test_decompression_is_linear_in_the_data(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a 398 KiB recording (one long line) took 25 s: each 4 KiB chunk re-split
    everything after the last line end. Now 400 MiB of one line inflates and is refused
    as damage in linear time, without holding it all."""
    path = _recording(tmp_path / "long.rec", b"x" * (400 << 20))
    assert path.stat().st_size < 1 << 20
    inflated, searched = [0], [0]

    class Counted(bytes):  # a decompressed piece that counts what is searched of it
        def find(self, sub: Any, start: Any = 0, *rest: Any) -> int:
            at = bytes.find(self, sub, start, *rest)
            searched[0] += (at + 1 if at >= 0 else len(self)) - start
            return at

    real = zlib.decompressobj

    class Inflate:
        def __init__(self, wbits: int) -> None:
            self.d = real(wbits)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            piece = self.d.decompress(data, max_length)
            inflated[0] += len(piece)
            return Counted(piece)

        def __getattr__(self, name: str) -> Any:  # unconsumed_tail, eof
            return getattr(self.d, name)

    monkeypatch.setattr(zlib, "decompressobj", Inflate)  # recording inflates with zlib
    rec = read(path)
    assert "a line longer than 64 MiB" in rec.damage and rec.snapshots == []
    # each inflated byte searched for a line end once (before: again with every chunk),
    # and inflating stopped past the longest line (before: all 400 MiB)
    assert searched[0] == inflated[0]
    assert inflated[0] <= recording.MAX_LINE + 2 * recording._CHUNK
