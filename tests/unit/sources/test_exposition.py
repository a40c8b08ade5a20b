"""The exposition source: local endpoints and textfile-collector files, parsed with
prometheus_client's parser; a slow endpoint never holds a collection; any configured input
that is failing, refused or stale makes prom.sample no value (the rules over it unknown,
never "ok"), with why; a cardinality cap; and dcgm-exporter's pages
(tests/data/dcgm_exporter, each naming its origin) through the source into the shipped GPU
rules. A file another user owns is refused: tests/system/test_exposition_textfile.py
(needs root)."""

from __future__ import annotations

import http.server
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.core.snapshot import Snapshot, labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.hostio.textfile import textfiles
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources import exposition
from guardian.sources.exposition import ExpositionConfig, ExpositionSource, Reading, parse
from tests.support.checkout import REPO
from tests.support.exposition import exposition_source
from tests.support.wait import BOUND, ends, wait_until

PAGES = REPO / "tests" / "data" / "dcgm_exporter"


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Gate:
    """Holds a server's answers: ``asked`` is set when a request comes, and the answer
    (a 503) waits until the test sets ``release``."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()


def _serve(body: bytes, gate: Gate | None = None
           ) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if gate is not None:
                gate.asked.set()
                gate.release.wait(BOUND)
                self.send_error(503)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/metrics"


@pytest.fixture
def page_server() -> Iterator[list[http.server.ThreadingHTTPServer]]:
    servers: list[http.server.ThreadingHTTPServer] = []
    yield servers
    for s in servers:
        s.shutdown()
        s.server_close()


def test_a_page_is_families_with_their_labels() -> None:
    # origin: dcgm-exporter README.md, Quickstart (recorded)
    text = (PAGES / "readme-quickstart.prom").read_text()
    fam, dropped = parse(text, "dcgm", 100, ["*"])
    assert dropped == 0
    key = labels_of({"target": "dcgm", "metric": "DCGM_FI_DEV_SM_CLOCK", "gpu": "0",
                     "UUID": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"})
    assert fam[key] == 139.0
    assert len(fam) == 3
    only, _ = parse(text, "dcgm", 100, ["DCGM_FI_DEV_*_CLOCK"])
    assert len(only) == 2


def test_the_cardinality_cap_drops_and_counts() -> None:
    text = "# TYPE x gauge\n" + "".join(f'x{{i="{i}"}} {i}\n' for i in range(50)) + "y 1\n"
    fam, dropped = parse(text, "t", 10, ["*"])
    assert dropped == 40 and len(fam) == 11  # 10 of x, and y


def test_an_endpoint_is_scraped_off_the_loop_and_a_slow_one_never_holds_it(
        page_server: list[http.server.ThreadingHTTPServer]) -> None:
    fast, fast_url = _serve((PAGES / "readme-quickstart.prom").read_bytes())
    gate = Gate()
    slow, slow_url = _serve(b"x 1\n", gate)  # answers (a 503) only when released
    page_server += [fast, slow]
    src = exposition_source(endpoints={"dcgm": fast_url, "app": slow_url}, timeout=BOUND,
                            interval=0.1)
    try:
        out = src.collect(0.0)  # starts the worker; nothing read yet: no value
        assert out["prom.sample"] is None
        assert gate.asked.wait(BOUND), "the worker never asked the slow endpoint"
        # the worker waits on the slow endpoint; a collection does not: it returns while
        # the read is pending (one that waited would return after the read failed)
        out = ends(lambda: src.collect(0.0), "a collection during the slow read")
        assert src.errors["app"] == 0 and not gate.release.is_set()
        assert out["prom.sample"] is None
        gate.release.set()
        wait_until(lambda: src.errors.get("app", 0) >= 1, "the slow endpoint's failure")
        out = src.collect(0.0)
        # one target failing: the family is no value, never part of it; up says which
        assert out["prom.sample"] is None
        assert out["prom.up"] == {labels_of({"target": "dcgm"}): 1.0,
                                  labels_of({"target": "app"}): 0.0}
    finally:
        gate.release.set()
        src.close()


def test_a_failing_then_stale_endpoint_is_no_value(
        page_server: list[http.server.ThreadingHTTPServer],
        request: pytest.FixtureRequest) -> None:
    srv, url = _serve((PAGES / "readme-quickstart.prom").read_bytes())
    page_server.append(srv)
    clock = _Clock()
    src = exposition_source(clock, endpoints={"dcgm": url}, max_age=30)
    request.addfinalizer(src.close)  # the worker collect() starts: never beyond the test
    src.refresh()
    fam = src.collect(0.0)["prom.sample"]
    assert isinstance(fam, dict) and len(fam) == 3
    clock.t += 31  # no read since: stale numbers are no value
    assert src.collect(0.0)["prom.sample"] is None
    srv.shutdown()
    srv.server_close()
    page_server.clear()
    src.refresh()  # connection refused
    out = src.collect(0.0)
    assert out["prom.sample"] is None
    # and why, as a fault of the source (guardian.source_errors, run --once, /healthz)
    assert any(f.startswith("dcgm: ") and "Connection refused" in f
               for f in src.faults()), src.faults()
    # the worker the first collect started reads on its own too, and may have met the
    # refused connection as well
    errors = out["prom.errors"]
    assert isinstance(errors, dict) and errors[labels_of({"target": "dcgm"})] >= 1.0
    assert out["prom.up"] == {labels_of({"target": "dcgm"}): 0.0}


def test_a_healthy_target_has_counted_no_failed_reads(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Before: prom.errors had no member for a file that was never failing (no value,
    shown as `-`, beside prom.dropped's 0)."""
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "node.prom").write_text("# TYPE reboot_required gauge\nreboot_required 1\n")
    src = exposition_source(textfile_directories=[str(d)], max_age=60)
    request.addfinalizer(src.close)
    src.refresh()
    out = src.collect(0.0)
    assert out["prom.errors"] == {labels_of({"target": "file:node.prom"}): 0.0}
    assert out["prom.dropped"] == {labels_of({"target": "file:node.prom"}): 0.0}
    (d / "node.prom").chmod(0o666)  # refused: writable by others; counted from then
    src.refresh()
    # the worker the first collect started reads on its own too, and may have met the
    # refused file as well: counted once or more, never left at 0
    errors = src.collect(0.0)["prom.errors"]
    assert isinstance(errors, dict)
    assert set(errors) == {labels_of({"target": "file:node.prom"})}
    assert errors[labels_of({"target": "file:node.prom"})] >= 1.0


def test_textfiles_are_read_without_blocking_capped_and_stale_by_mtime(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "node.prom").write_text("# TYPE reboot_required gauge\nreboot_required 1\n")
    os.mkfifo(d / "fifo.prom")  # a FIFO named *.prom is refused, never waited on
    (d / "big.prom").write_text("x 1\n" * 1000)
    (d / "ignored.txt").write_text("y 1\n")
    src = exposition_source(textfile_directories=[str(d)], max_bytes=1000, max_age=60)
    request.addfinalizer(src.close)  # its worker would read (and parse) on, every 15 s
    ends(src.refresh, "a round with a FIFO among the files")  # opening it would block
    out = src.collect(0.0)
    assert out["prom.up"] == {labels_of({"target": "file:node.prom"}): 1.0,
                              labels_of({"target": "file:fifo.prom"}): 0.0,
                              labels_of({"target": "file:big.prom"}): 0.0}
    node = {labels_of({"target": "file:node.prom", "metric": "reboot_required"}): 1.0}
    # node_exporter's textfile collector skips a file it cannot read and says so in
    # node_textfile_scrape_error ("1 if there was an error opening or reading a file");
    # Prometheus then sees the file's series absent and resolves their alerts. Here any
    # metric could have been in the two files that cannot be read: prom.sample has no
    # value (unknown), never the family of the rest; each file is a fault, with why
    assert out["prom.sample"] is None
    assert src.faults() == ["file:big.prom: ValueError: larger than 1000 bytes",
                            "file:fifo.prom: ValueError: not a regular file"]
    (d / "fifo.prom").unlink()
    (d / "big.prom").unlink()
    src.refresh()
    assert src.collect(0.0)["prom.sample"] == node
    assert src.faults() == []
    # node_exporter judges no age (it exports node_textfile_mtime_seconds for alerts to);
    # here a file last modified over max_age ago is a writer that stopped: no value
    old = time.time() - 120
    os.utime(d / "node.prom", (old, old))
    src.refresh()
    out = src.collect(0.0)
    assert out["prom.sample"] is None
    assert out["prom.up"] == {labels_of({"target": "file:node.prom"}): 0.0}
    # the file's own age, then the bound: "last modified 2m ago, over max_age (1m)"
    assert [re.sub(r"modified \S+ ago", "modified AGE ago", f) for f in src.faults()] == \
        ["file:node.prom: last modified AGE ago, over max_age (1m)"]


def _report(engine: Engine, snap: Snapshot) -> dict[str, tuple[str, list[str]]]:
    """Each rule's condition as `guardian run --once` reports it (runtime/once.py): holds,
    ok or unknown, and the signals that have no value."""
    out = {}
    for rule in engine.ruleset.rules:
        result = rule.condition.fn(snap.values, engine.history)
        out[rule.name] = ("unknown" if result is None else "holds" if result else "ok",
                          [r.key for r in rule.condition.refs if r.value(snap.values) is None])
    return out


def test_a_ten_minute_old_textfile_is_no_value_with_why_never_healthy(tmp_path: Path) -> None:
    """A 5-minute cron job's dcgm.prom, last written 10 minutes ago (its writer stopped, or
    max_age is shorter than its period): the GPU rules are unknown, naming the signal and
    the file's age, never "ok" over an empty family."""
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "dcgm.prom").write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0"} 0\n')
    old = time.time() - 600
    os.utime(d / "dcgm.prom", (old, old))
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    collector = Collector(Host(), [src])
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    try:
        src.refresh()
        snap = collector.collect(0.0)
    finally:
        collector.close()
    assert "prom.sample" not in snap.values
    assert re.fullmatch(r"file:dcgm\.prom: last modified 10m\d*s? ago, over max_age \(1m\)",
                        snap.errors["exposition"]), snap.errors["exposition"]
    report = _report(engine, snap)
    assert report["gpu-dcgm-fallen-off-bus"] == (
        "unknown", ['prom.sample{metric="DCGM_FI_DEV_XID_ERRORS"}'])
    assert {cond for cond, _ in report.values()} == {"unknown"}


@pytest.mark.parametrize(("file_mode", "dir_mode", "fault"), [
    (0o664, 0o755, "file:dcgm.prom: ValueError: writable by group or others (mode 0664)"),
    (0o646, 0o755, "file:dcgm.prom: ValueError: writable by group or others (mode 0646)"),
    (0o644, 0o775, "dir:{d}: ValueError: writable by group or others (mode 0775)"),
], ids=["group-writable-file", "world-writable-file", "group-writable-directory"])
def test_a_textfile_others_may_write_is_no_value_with_why(
        tmp_path: Path, file_mode: int, dir_mode: int, fault: str) -> None:
    """A file (or its directory) a group or other users may write is refused (anyone who
    can write a .prom file could fire or silence the GPU rules): the only input refused,
    prom.sample has no value, never the empty family. (Owned by another user, which needs
    root to set up: tests/system/test_exposition_textfile.py.)"""
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "dcgm.prom").write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0"} 0\n')
    os.chmod(d / "dcgm.prom", file_mode)
    os.chmod(d, dir_mode)
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    collector = Collector(Host(), [src])
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    try:
        src.refresh()
        snap = collector.collect(0.0)
    finally:
        collector.close()
    assert "prom.sample" not in snap.values
    assert snap.errors["exposition"] == fault.format(d=d)
    assert _report(engine, snap)["gpu-dcgm-xid-needs-reset"][0] == "unknown"


def test_one_input_refused_makes_the_whole_family_no_value(
        tmp_path: Path, page_server: list[http.server.ThreadingHTTPServer],
        caplog: pytest.LogCaptureFixture) -> None:
    """An endpoint that answers and textfiles that do not (malformed, stale, a directory
    that is not there): any metric, the XID counter too, could have come from those, so
    prom.sample has no value and the GPU rules neither fire nor resolve on the endpoint's
    part alone (docs/signals.md); each target is a fault with why, logged when it starts
    and when it ends failing. Once the inputs answer, the endpoint's XID 79 fires."""
    srv, url = _serve((PAGES / "xid79-fallen-off-bus.prom").read_bytes())
    page_server.append(srv)
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "bad.prom").write_text("this is { not exposition\n")
    (d / "old.prom").write_text("x 1\n")
    old = time.time() - 120
    os.utime(d / "old.prom", (old, old))
    gone = str(tmp_path / "missing")
    src = exposition_source(endpoints={"dcgm": url}, textfile_directories=[str(d), gone],
                            max_age=60, interval=3600)
    assert ExpositionSource.config_warnings(src.cfg) == [
        f"textfile directory {gone} does not exist"]
    collector = Collector(Host(), [src])
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    caplog.set_level("INFO", logger="guardian.sources.exposition")
    try:
        src.refresh()
        for t in (0.0, 15.0):
            snap = collector.collect(t)
            engine.evaluate(snap)
        assert engine.firing() == []
        assert "prom.sample" not in snap.values
        assert _report(engine, snap)["gpu-dcgm-fallen-off-bus"][0] == "unknown"
        assert [f.split(":")[0:2] for f in src.faults()] == [
            ["dir", gone], ["file", "bad.prom"], ["file", "old.prom"]]
        assert "bad.prom" in snap.errors["exposition"]
        assert collector.error_counts["exposition"] == 2
        up = snap.get("prom.up")
        assert isinstance(up, dict) and up[labels_of({"target": "dcgm"})] == 1.0
        assert up[labels_of({"target": "file:bad.prom"})] == 0.0
        # logged once when a target starts failing and once when it ends, not every tick
        warned = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 3
        (d / "bad.prom").unlink()
        src.refresh()
        collector.collect(30.0)
        collector.collect(45.0)
        assert len([r for r in caplog.records if "bad.prom" in r.getMessage()]) == 2
        assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 3
        # every input answering again (the old file rewritten, the directory made):
        # the endpoint's XID 79 fires the rule
        os.utime(d / "old.prom")
        Path(gone).mkdir()
        src.refresh()
        snap = collector.collect(60.0)
        assert src.faults() == []
        engine.evaluate(snap)
        assert engine.firing() == ["gpu-dcgm-fallen-off-bus"]
    finally:
        src.close()


def test_a_textfile_removed_after_the_listing_is_gone_not_failing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file listed and then removed before its read (a cleanup, a writer replacing it)
    is no target any more, as the next listing would say: not a failing input that would
    make prom.sample no value."""
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "node.prom").write_text("x 1\n")
    monkeypatch.setattr(exposition, "textfiles",
                        lambda base: [*textfiles(base), "removed.prom"])
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    src.refresh()
    out = src.collect(0.0)
    assert out["prom.sample"] == {labels_of({"target": "file:node.prom", "metric": "x"}): 1.0}
    assert src.faults() == []
    up = out["prom.up"]
    assert isinstance(up, dict) and labels_of({"target": "file:removed.prom"}) not in up


def test_no_value_until_the_first_whole_round(tmp_path: Path) -> None:
    """While the worker's first round is under way, the targets read so far are not all
    the inputs: no value (before, the first file read stood for the whole family)."""
    d = tmp_path / "textfile"
    d.mkdir()
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    src.close()  # no worker: the test plays its part
    # what the worker has kept mid-round: one file read, the others not yet
    src._keep("file:a.prom", Reading(src.clock(), {}, modified=time.time()))
    assert src.collect(0.0)["prom.sample"] is None
    src.refresh()  # a whole round: an empty directory has no members, and says so
    assert src.collect(0.0)["prom.sample"] == {}


def test_a_targets_samples_are_capped_in_all_and_a_huge_page_bounded() -> None:
    # 150,000 distinct names, each under max_series: capped by max_samples in all
    text = "".join(f"m{i} 1\n" for i in range(150_000))
    # parsing stops at twice max_samples: a malformed line far past it is never read
    fam, dropped = parse(text + "}}} not a sample\n", "t", 2_000, ["*"], max_samples=10_000)
    assert len(fam) == 10_000 and dropped >= 10_000
    with pytest.raises(ValueError, match="not a sample"):  # where it is read, it is refused
        parse(text[:100] + "}}} not a sample\n", "t", 2_000, ["*"], max_samples=10_000)
    cfg = ExpositionConfig.model_validate({"textfile_directories": ["/x"]})
    assert cfg.max_samples == 10_000


def test_no_targets_no_source_and_remote_endpoints_warned() -> None:
    # nothing configured: the operator's choice, told apart from a host that cannot
    # (rules over prom.sample are blind with cause "unconfigured")
    assert ExpositionSource(Host()).unconfigured() == \
        "no endpoints or textfile directories in [sources.exposition]"
    assert ExpositionSource(Host()).unavailable() is not None
    configured = ExpositionConfig.model_validate({"textfile_directories": ["/x"]})
    assert ExpositionSource(Host(), configured).unconfigured() is None
    cfg = ExpositionConfig.model_validate({"endpoints": {
        "dcgm": "http://127.0.0.1:9400/metrics", "far": "http://10.0.0.7:9100/metrics"}})
    assert ExpositionSource.config_warnings(cfg) == [
        "endpoint 'far' (http://10.0.0.7:9100/metrics) is not on this node's loopback"]
    with pytest.raises(ValueError, match="not an http"):
        ExpositionConfig.model_validate({"endpoints": {"x": "file:///etc/passwd"}})


# -- dcgm-exporter pages through the source into rules/gpu-dcgm.toml ------------------

# (pages in order, one a minute, and the GPU rules firing after the last; origins in
# each file's first line and tests/data/dcgm_exporter/README.md)
GPU_CASES = [
    (["readme-quickstart.prom"], []),
    (["xid13-application.prom"], []),
    (["xid79-fallen-off-bus.prom"], ["gpu-dcgm-fallen-off-bus"]),
    (["xid48-dbe.prom"], ["gpu-dcgm-ecc-uncorrectable", "gpu-dcgm-xid-needs-reset"]),
    (["ecc-dbe-0.prom", "ecc-dbe-2.prom"], ["gpu-dcgm-ecc-uncorrectable"]),
    (["ecc-dbe-0.prom", "ecc-dbe-0.prom"], []),
    (["row-remap-failure.prom"], ["gpu-dcgm-row-remap-failed"]),
    (["row-remap-pending.prom"], ["gpu-dcgm-row-remap-pending"]),
    (["nvlink-0.prom", "nvlink-recovery.prom"], ["gpu-dcgm-nvlink-errors"]),
    (["throttle-sw-power-cap.prom"] * 4, []),
    (["throttle-hw-thermal.prom"] * 4, ["gpu-dcgm-power-throttle",
                                        "gpu-dcgm-thermal-throttle"]),
    (["throttle-power-brake.prom"] * 4, ["gpu-dcgm-power-throttle"]),
]


@pytest.mark.parametrize(("pages", "want"), GPU_CASES, ids=[c[0][-1] for c in GPU_CASES])
def test_dcgm_exporter_pages_fire_the_shipped_gpu_rules(
        tmp_path: Path, pages: list[str], want: list[str]) -> None:
    d = tmp_path / "textfile"
    d.mkdir()
    clock = _Clock()
    src = exposition_source(clock, textfile_directories=[str(d)], max_age=120)
    collector = Collector(Host(), [src])
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    try:
        for i, page in enumerate(pages):
            (d / "dcgm.prom").write_text((PAGES / page).read_text())
            src.refresh()
            snap = collector.collect(60.0 * i)
            assert snap.get("prom.sample"), snap.errors
            engine.evaluate(snap)
            clock.t += 60
        assert sorted(engine.firing()) == want
    finally:
        src.close()


def test_an_endpoint_page_fires_a_shipped_rule(
        page_server: list[http.server.ThreadingHTTPServer],
        request: pytest.FixtureRequest) -> None:
    srv, url = _serve((PAGES / "xid79-fallen-off-bus.prom").read_bytes())
    page_server.append(srv)
    src = exposition_source(endpoints={"dcgm": url})
    request.addfinalizer(src.close)
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    src.refresh()
    engine.evaluate(Collector(Host(), [src]).collect(0.0))
    assert engine.firing() == ["gpu-dcgm-fallen-off-bus"]


def test_the_dcgm_xid_rule_and_the_kernel_log_rule_agree_on_the_reset_codes() -> None:
    """gpu-dcgm-xid-needs-reset names the codes kmsg's gpu.xid_by_action calls reset_gpu
    (NVIDIA's catalog, guardian/sources/kernel_patterns.py), no more and no fewer."""
    import re

    from guardian.sources.kernel_patterns import XID_ACTIONS
    text = (REPO / "rules" / "gpu-dcgm.toml").read_text()
    rule = text.split('name = "gpu-dcgm-xid-needs-reset"')[1].split("[[rule]]")[0]
    codes = {int(c) for c in re.findall(r'XID_ERRORS"\} == (\d+)', rule)}
    assert codes == {c for c, a in XID_ACTIONS.items() if a == "reset_gpu"}
