"""The journal source against a stand-in journalctl (a script that speaks its JSON output
as `journalctl --output=json` does: one object a line, ``__CURSOR`` and ``MESSAGE``
strings, ``MESSAGE`` an array of byte values when not UTF-8; systemd's
man/journalctl.xml and docs/JOURNAL_EXPORT_FORMATS.md): a flood, a hang, a crash, a cursor
resume. The real journal is tests/system/test_journal_real.py."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.journal import JournalConfig, JournalSource, entry_unit
from tests.support.wait import ends, wait_until

# the stand-in: prints the entries of a JSON file (a list), logs its argv, then acts
FAKE = r'''
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "argv.log"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
after = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--after-cursor=")]
entries = json.load(open(os.path.join(here, "entries.json")))
mode = open(os.path.join(here, "mode")).read().strip()
skip = True if after else False
out = []
for e in entries:
    if skip:
        skip = e["__CURSOR"] != after[0]
        continue
    out.append(json.dumps(e))
if out:
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
if mode == "crash":
    sys.exit(3)
time.sleep(3600)
'''


def _fake(tmp: Path, entries: list[dict[str, object]], mode: str = "hang") -> list[str]:
    (tmp / "fake.py").write_text(FAKE)
    (tmp / "entries.json").write_text(json.dumps(entries))
    (tmp / "mode").write_text(mode)
    return [sys.executable, str(tmp / "fake.py")]


def _entry(i: int, message: str, unit: str = "kubelet.service",
           uid: str = "0") -> dict[str, object]:
    return {"__CURSOR": f"s=1;i={i}", "MESSAGE": message, "_SYSTEMD_UNIT": unit,
            "_PID": "4242", "_UID": uid}


def _wait(pred: Callable[[], object]) -> None:
    wait_until(pred, "the source to have read what the stand-in printed")


def _source(argv: list[str], host: Host | None = None, **kw: object) -> JournalSource:
    cfg = JournalConfig.model_validate({
        "journalctl": argv, "units": ["kubelet.service", "containerd.service"],
        "patterns": {"pleg": r"PLEG is not healthy", "oom": r"out of memory"}, **kw})
    return JournalSource(host or Host(), cfg)


def _journald_host(tmp: Path) -> Host:
    (tmp / "host" / "run" / "systemd" / "journal").mkdir(parents=True)
    (tmp / "host" / "run" / "systemd" / "journal" / "socket").touch()
    return Host(root=tmp / "host")


def test_matches_by_pattern_and_unit_wake_the_loop_and_count_from_zero(tmp_path: Path) -> None:
    entries: list[dict[str, object]] = [_entry(1, "I0101 kubelet.go:2400] skipping pod"),
               _entry(2, 'E0101 kubelet.go:2412] "Skipping pod synchronization" '
                         'err="PLEG is not healthy: pleg was last seen active 3m0s ago"'),
               {"__CURSOR": "s=1;i=3", "MESSAGE": list(b"out of memory \xff"),
                "_SYSTEMD_UNIT": "containerd.service", "_UID": "0"}]
    src = _source(_fake(tmp_path, entries), _journald_host(tmp_path))
    woken: list[str] = []
    try:
        assert src.unavailable() is None
        assert src.follow(woken.append)
        _wait(lambda: src.lines == 3)
        out = src.collect(1.0)
        m = out["journal.matches"]
        assert isinstance(m, dict)
        assert m[labels_of({"pattern": "pleg", "unit": "kubelet.service"})] == 1
        assert m[labels_of({"pattern": "oom", "unit": "containerd.service"})] == 1
        # each configured unit is there from zero: the first match is an increase
        assert m[labels_of({"pattern": "pleg", "unit": "containerd.service"})] == 0
        assert out["journal.lines"] == 3
        _wait(lambda: woken)
        assert woken[0].startswith("journal: ")
        argv = json.loads((tmp_path / "argv.log").read_text().splitlines()[0])
        assert "--unit=kubelet.service" in argv and "--output=json" in argv
        assert "--lines=0" in argv  # no kept cursor: from the end
    finally:
        src.close()


def test_systemds_own_words_about_a_unit_count_as_that_units() -> None:
    # PID 1 logs "X.service: Main process exited" with UNIT=X.service (src/core/unit.c)
    assert entry_unit({"_SYSTEMD_UNIT": "init.scope", "UNIT": "crashy.service",
                       "_PID": "1"}) == "crashy.service"
    assert entry_unit({"_SYSTEMD_UNIT": "kubelet.service"}) == "kubelet.service"
    assert entry_unit({}) == ""


def test_a_unit_field_from_any_sender_but_pid_1_is_not_trusted() -> None:
    # journald sets the underscore fields from the sender's credentials; UNIT= is the
    # sender's own (systemd.journal-fields(7)): `logger --journald` can set it
    assert entry_unit({"UNIT": "kubelet.service", "_PID": "4242"}) == ""
    assert entry_unit({"UNIT": "kubelet.service", "_PID": "4242",
                       "_SYSTEMD_UNIT": "session-3.scope"}) == "session-3.scope"


def test_entries_of_senders_outside_uids_are_skipped_not_matched(tmp_path: Path) -> None:
    # any user can `logger 'PLEG is not healthy'`; journald's _UID is the sender's
    entries: list[dict[str, object]] = [_entry(1, "PLEG is not healthy", uid="1000"),
               {"__CURSOR": "s=1;i=2", "MESSAGE": "PLEG is not healthy"},  # no _UID
               _entry(3, "PLEG is not healthy")]
    src = _source(_fake(tmp_path, entries))
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.lines == 3)
        out = src.collect(1.0)
        m, skipped = out["journal.matches"], out["journal.skipped"]
        assert isinstance(m, dict) and isinstance(skipped, dict)
        assert {k: v for k, v in m.items() if v} == {
            labels_of({"pattern": "pleg", "unit": "kubelet.service"}): 1}
        assert skipped[labels_of({"reason": "uid"})] == 2
    finally:
        src.close()
    assert JournalConfig.model_validate({"uids": []}).uids == []


def test_no_journald_on_the_host_is_unavailable_not_healthy_zeros(tmp_path: Path) -> None:
    # journald's socket and journal directories (systemd-journald.service(8))
    root = tmp_path / "host"
    root.mkdir()
    src = _source(["journalctl"], Host(root=root))
    assert "no journald" in (src.unavailable() or "")
    for path in ("run/systemd/journal/socket", "run/log/journal", "var/log/journal"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
        assert src.unavailable() is None
        (root / path).unlink()
    other = _source(["journalctl"], Host(root=root), directory="/srv/journal")
    assert "does not exist" in (other.unavailable() or "")
    (root / "srv" / "journal").mkdir(parents=True)
    assert other.unavailable() is None


def test_a_flood_is_bounded_per_tick_and_the_rest_counted(tmp_path: Path) -> None:
    entries = [_entry(i, "PLEG is not healthy") for i in range(1, 5001)]
    src = _source(_fake(tmp_path, entries), max_entries_per_tick=100)
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.lines == 5000)
        out = src.collect(1.0)  # matches 100, counts the rest: the counts say so
        m = out["journal.matches"]
        assert isinstance(m, dict)
        assert m[labels_of({"pattern": "pleg", "unit": "kubelet.service"})] == 100
        assert out["journal.skipped"][labels_of({"reason": "flood"})] == 4900  # type: ignore[index]
        # the cursor moved past the entries only counted
        src.close()
        assert src.cursor == "s=1;i=5000"
    finally:
        src.close()


def test_a_hanging_journalctl_never_stalls_a_collection_and_close_ends_it(
        tmp_path: Path) -> None:
    src = _source(_fake(tmp_path, [], mode="hang"))
    src.follow(lambda _: None)
    # the stand-in prints nothing and sleeps an hour: a collection that waited on it
    # would never return
    out = ends(lambda: src.collect(1.0), "a collection while journalctl hangs")
    assert out["journal.lines"] == 0
    proc = src.proc
    assert proc is not None and proc.poll() is None  # still hanging
    ends(src.close, "close() of a source whose journalctl hangs")
    assert proc.poll() is not None


def test_a_crashed_journalctl_is_no_value_then_restarted_after_its_cursor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("guardian.sources.journal._BACKOFF_FIRST", 0.2)
    entries = [_entry(1, "PLEG is not healthy"), _entry(2, "fine")]
    src = _source(_fake(tmp_path, entries, mode="crash"))
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.proc is None and src.lines == 2)
        with pytest.raises(OSError, match="exited with status 3"):
            src.collect(1.0)  # no value, never a quiet zero: a source error
        (tmp_path / "mode").write_text("hang")
        _wait(lambda: len((tmp_path / "argv.log").read_text().splitlines()) == 2)
        out = src.collect(2.0)
        assert out["journal.restarts"] == 1
        argv = json.loads((tmp_path / "argv.log").read_text().splitlines()[-1])
        assert "--after-cursor=s=1;i=2" in argv  # nothing counted twice
        assert out["journal.lines"] == 2
    finally:
        src.close()


def test_a_missing_journalctl_is_a_source_error_not_a_zero(tmp_path: Path) -> None:
    src = _source([str(tmp_path / "no-journalctl")])
    try:
        with pytest.raises(OSError, match="cannot run"):
            src.collect(1.0)
    finally:
        src.close()


def test_the_cursor_is_kept_across_restarts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    entries = [_entry(1, "PLEG is not healthy"), _entry(2, "x")]
    first = _source(_fake(tmp_path, entries))
    first.keep_state(state)
    first.follow(lambda _: None)
    _wait(lambda: first.lines == 2)
    first.collect(1.0)
    first.close()
    assert json.loads((state / "journal-cursor.json").read_text())["cursor"] == "s=1;i=2"
    # logged while no guardian ran: read once by the next
    (tmp_path / "entries.json").write_text(json.dumps(
        [*entries, _entry(3, "PLEG is not healthy again")]))
    second = _source(_fake(tmp_path, [*entries, _entry(3, "PLEG is not healthy again")]))
    second.keep_state(state)
    try:
        second.follow(lambda _: None)
        _wait(lambda: second.lines == 1)
        out = second.collect(1.0)
        assert out["journal.matches"][labels_of(  # type: ignore[index]
            {"pattern": "pleg", "unit": "kubelet.service"})] == 1
    finally:
        second.close()


def test_overlong_and_broken_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    entries: list[dict[str, object]] = [_entry(1, "x" * 5000), _entry(2, "PLEG is not healthy")]
    src = _source(_fake(tmp_path, entries), max_line_bytes=1000)
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.lines == 2)
        out = src.collect(1.0)
        assert out["journal.skipped"][labels_of({"reason": "too_long"})] == 1  # type: ignore[index]
        assert out["journal.matches"][labels_of(  # type: ignore[index]
            {"pattern": "pleg", "unit": "kubelet.service"})] == 1
    finally:
        src.close()


def test_no_patterns_no_reader_and_bad_config_refused() -> None:
    lacks = "no patterns or include in [sources.journal]"
    assert JournalSource(Host()).unconfigured() == lacks
    assert JournalSource(Host()).unavailable() == lacks
    with pytest.raises(ValueError, match="nested quantifiers"):
        JournalConfig.model_validate({"patterns": {"bad": "(a+)+$"}})
    with pytest.raises(ValueError, match="not a unit name"):
        JournalConfig.model_validate({"patterns": {"x": "y"}, "units": ["--all"]})
    assert threading.active_count() >= 1


def test_rule_test_samples_check_the_patterns() -> None:
    src = _source(["journalctl"])
    assert src.check_sample({"message": "PLEG is not healthy: pleg was last seen active",
                             "matches": ["pleg"]}) is None
    assert "want: ['oom']" in (src.check_sample({"message": "fine", "matches": ["oom"]})
                               or "")
    with pytest.raises(ValueError, match="unknown pattern"):
        src.check_sample({"message": "x", "matches": ["nope"]})


def test_an_older_journalctl_without_output_fields_is_run_without(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # systemd 236 added --output-fields (NEWS); older ones refuse it and exit 1
    monkeypatch.setattr("guardian.sources.journal._BACKOFF_FIRST", 0.1)
    argv = _fake(tmp_path, [_entry(1, "PLEG is not healthy")])
    old = tmp_path / "old.py"
    old.write_text("import sys, runpy\n"
                   "if any(a.startswith('--output-fields') for a in sys.argv): sys.exit(1)\n"
                   f"sys.argv = sys.argv[:1] + sys.argv[1:]\nrunpy.run_path({argv[1]!r})\n")
    src = _source([sys.executable, str(old)])
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.lines == 1)
        assert src.collect(1.0)["journal.restarts"] == 1
        assert not src.output_fields
    finally:
        src.close()


def test_a_kept_cursor_journalctl_refuses_is_given_up_for_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # journalctl exits 1 on a cursor it cannot parse ("Failed to seek to cursor")
    monkeypatch.setattr("guardian.sources.journal._BACKOFF_FIRST", 0.05)
    argv = _fake(tmp_path, [_entry(1, "PLEG is not healthy")])
    picky = tmp_path / "picky.py"
    picky.write_text("import sys, runpy\n"
                     "if any(a.startswith('--after-cursor') for a in sys.argv): sys.exit(1)\n"
                     f"runpy.run_path({argv[1]!r})\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal-cursor.json").write_text(json.dumps({"argv": [""], "cursor": "bad"}))
    src = _source([sys.executable, str(picky)])
    src.keep_state(state)
    try:
        src.follow(lambda _: None)
        _wait(lambda: src.lines == 1)
        assert src.cursor == "s=1;i=1" and src.output_fields
    finally:
        src.close()
