"""The flight recorder with the real perf on this host: what a process did in the kernel is
in the dump although it ended before the dump was asked for (the minutes before a rule
fired, as the incident needed); perf's files do not pile up; a perf that cannot profile is
said once and never raises; the service starts it once ready and stops it when it stops."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.hostio import flight
from guardian.hostio.flight import FlightRecorder
from tests.support.daemon import daemon
from tests.support.wait import BOUND, ends, wait_until

PERF = shutil.which("perf")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _paranoid() -> int:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        return 99


pytestmark = [
    pytest.mark.skipif(PERF is None, reason="perf is not installed (Debian: linux-perf)"),
    pytest.mark.skipif(os.geteuid() != 0 and _paranoid() > -1,
                       reason="perf_event_paranoid forbids a CPU-wide profile to non-root"),
]


def _stime(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / CLK_TCK


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[FlightRecorder]:
    rec = FlightRecorder(frequency=49, ring_mb=8, workdir=tmp_path / "flight")
    try:
        yield rec
    finally:
        rec.stop()


def test_a_process_that_ended_before_the_dump_is_in_it_with_kernel_frames(
        recorder: FlightRecorder, tmp_path: Path) -> None:
    """Before: no flight recorder (guardian.hostio.flight did not exist)."""
    recorder.start()
    assert recorder.running and flight.current() is recorder
    # its name is its comm, unique to this run: perf samples every process of the host,
    # and CI runs two interpreters' suites side by side (another run's busy loop is in
    # this recorder's ring too)
    comm = f"gflt-{os.getpid() % 10**9:x}"[:15]
    busy = tmp_path / comm
    shutil.copy(shutil.which("dd") or "/bin/dd", busy)
    # a tight syscall loop: a read and a write of one byte, over and over
    proc = subprocess.Popen([str(busy), "if=/dev/zero", "of=/dev/null", "bs=1"],
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _stime(proc.pid) >= 0.5, "the busy loop burns 0.5 s in the kernel")
    finally:
        proc.kill()
        proc.wait()
    assert not Path(f"/proc/{proc.pid}").exists()  # gone before the dump is asked for

    got = recorder.dump(tmp_path / "bundle")
    assert got == tmp_path / "bundle" / "flight.folded"
    lines = got.read_text().splitlines()
    mine = [ln for ln in lines if ln.startswith(f"{comm};")]
    assert mine, f"no stack of {comm} among {len(lines)}: {lines[:5]}"
    kernel = [ln for ln in mine if "_[k];" in ln or ln.rsplit(" ", 1)[0].endswith("_[k]")]
    assert kernel, f"{comm}'s stacks have no kernel frame: {mine[:5]}"
    assert any("do_syscall_64_[k]" in ln for ln in kernel), kernel[:5]
    assert all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines)  # folded: stack count
    assert recorder.last is not None and recorder.last.samples >= len(mine)
    # perf's switched file is read and removed; perf still records
    assert sorted(p.name for p in (tmp_path / "flight").iterdir()) == \
        ["flight.data", "perf.log"]
    assert recorder.running

    # a second dump holds what came since the first, and leaves nothing behind either
    again = recorder.dump(tmp_path / "bundle2")
    assert again is not None and not any(
        ln.startswith(f"{comm};") for ln in again.read_text().splitlines())
    assert sorted(p.name for p in (tmp_path / "flight").iterdir()) == \
        ["flight.data", "perf.log"]

    recorder.stop()
    assert not recorder.running and flight.current() is None
    assert recorder.dump(tmp_path / "bundle3") is None
    assert not list((tmp_path / "flight").glob("flight.data.*"))


def test_a_perf_that_may_not_profile_is_said_once_and_never_raises(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """perf run as nobody (perf_event_paranoid 2 here): its own words are logged, once."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or _paranoid() < 1:
        pytest.skip("needs root, setpriv and perf_event_paranoid >= 1")
    wrapper = tmp_path / "perf-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid 65534 --regid 65534 '
                       f'--clear-groups {PERF} "$@"\n')
    wrapper.chmod(0o755)
    work = Path(tempfile.mkdtemp(prefix="gflt-"))  # nobody writes perf's files there
    work.chmod(0o777)
    rec = FlightRecorder(perf=str(wrapper), workdir=work)
    try:
        with caplog.at_level(logging.WARNING, logger="guardian.flight"):
            rec.start()
            rec.start()
            assert rec.dump(tmp_path / "bundle") is None
        assert not rec.running and flight.current() is None
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert said[0].startswith("flight recorder not started: perf exited"), said
        assert "perf_event_paranoid" in said[0], said
        # perf's first words, with the capability it needs (before: its last 500
        # characters, cut mid-word, without CAP_PERFMON; issue 43)
        assert "perf exited with status 255 Error: Access to performance" in said[0], said
        assert "CAP_PERFMON" in said[0], said
    finally:
        rec.stop()
        shutil.rmtree(work, ignore_errors=True)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _comm(pid: int) -> str:
    """Process ``pid``'s name; "" once it has ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return "" if stat[stat.rindex(")") + 2] == "Z" else stat[stat.index("(") + 1:
                                                              stat.rindex(")")]


def test_the_service_runs_perf_once_ready_and_ends_it_when_it_stops(tmp_path: Path) -> None:
    config = tmp_path / "guardian.toml"
    config.write_text("[evidence.flight]\nenabled = true\nring_mb = 1\n")
    with daemon(tmp_path, "--dry-run", "--config", str(config)) as (proc, notify):
        notify.wait_for("READY", timeout=60)
        perf = wait_until(lambda: [c for c in _children(proc.pid) if _comm(c) == "perf"],
                          "the service starts perf once it is ready")[0]
        assert b"--overwrite" in Path(f"/proc/{perf}/cmdline").read_bytes().split(b"\0")
        assert (tmp_path / "flight" / "flight.data").exists()  # beside the state file
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert _comm(perf) != "perf"


def _hanging_script(tmp_path: Path) -> Path:
    """perf, except that `perf script` never ends (a huge ring on a loaded node)."""
    wrapper = tmp_path / "perf-slow-script"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = script ] && exec sleep 3600\nexec {PERF} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_a_dump_past_its_timeout_is_abandoned_and_perf_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = FlightRecorder(perf=str(_hanging_script(tmp_path)), workdir=tmp_path / "w",
                         dump_timeout=1.0)
    try:
        rec.start()
        assert rec.running
        with caplog.at_level(logging.WARNING, logger="guardian.flight"):
            assert rec.dump(tmp_path / "bundle") is None
        assert any("perf script ran past" in r.getMessage() for r in caplog.records)
        assert not (tmp_path / "bundle" / "flight.folded").exists()
        assert not list((tmp_path / "w").glob("flight.data.*"))  # its file removed too
        assert rec.running  # the ring goes on
    finally:
        rec.stop()


def test_stop_cuts_a_running_dump_short(tmp_path: Path) -> None:
    """The service's stop (TimeoutStopSec=10s) does not wait out a dump's timeout."""
    rec = FlightRecorder(perf=str(_hanging_script(tmp_path)), workdir=tmp_path / "w",
                         dump_timeout=3600.0)
    rec.start()
    got: list[Path | None] = []
    worker = threading.Thread(target=lambda: got.append(rec.dump(tmp_path / "bundle")))
    worker.start()
    try:
        wait_until(lambda: list((tmp_path / "w").glob("flight.data.*")),
                   "perf has written the dump's file")
    finally:
        ends(rec.stop, "stop, while a dump waits on perf script")
    worker.join(BOUND)
    assert not worker.is_alive() and got == [None]
    assert not rec.running


CHILD = """
import sys, time
from pathlib import Path
from guardian.hostio.flight import FlightRecorder
rec = FlightRecorder(workdir=Path(sys.argv[1]))
rec.start()
print(rec._proc.pid if rec.running else 0, flush=True)
time.sleep(3600)
"""


def test_perf_dies_with_a_killed_guardian(tmp_path: Path) -> None:
    """SIGKILL leaves no stop to run: perf must not go on profiling alone."""
    if flight._setpriv_pdeathsig() is None:
        pytest.skip("no setpriv with --pdeathsig (util-linux 2.33 or later)")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "w")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        perf = int(proc.stdout.readline())
        assert perf and _comm(perf) == "perf"
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: _comm(perf) != "perf", "perf ends with the process that ran it")
