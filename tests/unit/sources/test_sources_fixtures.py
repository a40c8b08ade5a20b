"""Source parsers on recorded trees from real hosts (shared/fixtures/procfs, from the
Prometheus procfs test data) and on trees recorded for what this VM lacks (cgroup v2,
hybrid cgroups, an ENA NIC, systemd), plus garbage, truncated and empty files."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import labels_of
from guardian.hostio.cgroupfs import detect_layout
from guardian.hostio.ethtool import ETH_GSTRING_LEN, parse_gstats, parse_gstrings
from guardian.hostio.host import Host
from guardian.hostio.procfs import ProcessTable, parse_proc_stat
from guardian.hostio.systemctl import parse_show
from guardian.plugin.contract import Source
from guardian.runtime.collector import Collector
from guardian.sources.cgroups import CgroupsSource
from guardian.sources.cpu import CpuSource
from guardian.sources.kmsg import KmsgSource
from guardian.sources.net import NetSource
from guardian.sources.pressure import PressureSource
from guardian.sources.processes import ProcessesSource
from guardian.sources.systemd import SystemdSource
from guardian.testing import FakeHost
from tests.support.checkout import FIXTURES

FIX = FIXTURES


def cpu(n: int | str) -> tuple[tuple[str, str], ...]:
    return labels_of({"cpu": str(n)})


def test_processes_on_a_recorded_tree(procfs_fixtures: Path) -> None:
    out = ProcessesSource(Host(procfs_fixtures)).collect(0.0)
    # pids with a stat file: 26231 (vim), 26232 (kernel thread), 584, 27079
    assert out["processes.total"] == 4
    assert out["processes.kernel_threads"] == 1
    assert out["processes.zombies"] == 0


def test_kernel_threads_are_read_once_then_counted_by_pid(tmp_path: Path) -> None:
    """Issue 20: a kernel thread's stat is read when it is first seen, then only its PID's
    presence is checked, until the periodic re-read (which catches a reused PID)."""
    fake = FakeHost(tmp_path)
    fake.process(2, "kthreadd", flags=0x00200000, ppid=0)
    fake.process(40, "ksoftirqd/0", flags=0x00200040, ppid=2)
    fake.process(100, "kubelet")
    table = ProcessTable(fake.host.proc, recheck=3)
    procs, kthreads = table.scan()
    assert ([p.comm for p in procs], kthreads) == (["kubelet"], 2)
    # garbage in a known kernel thread's stat would raise if it were read again
    fake.write("proc/40/stat", "garbage")
    procs, kthreads = table.scan()
    assert ([p.comm for p in procs], kthreads) == (["kubelet"], 2)
    shutil.rmtree(tmp_path / "proc/2")  # exited: no longer counted
    assert table.scan()[1] == 1
    fake.process(40, "reused")  # every third scan (recheck=3) re-reads every PID
    procs, kthreads = table.scan()
    assert (sorted(p.comm for p in procs), kthreads) == (["kubelet", "reused"], 0)


def test_comm_with_spaces_and_parentheses(procfs_fixtures: Path) -> None:
    st = parse_proc_stat((procfs_fixtures / "proc/584/stat").read_text())
    assert (st.pid, st.comm, st.state, st.ppid) == (1020, "(a b ) ( c d) ", "R", 28378)
    kt = parse_proc_stat((procfs_fixtures / "proc/26232/stat").read_text())
    assert kt.is_kernel_thread and kt.comm == "ata_sff"


def test_cpu_on_a_recorded_tree(procfs_fixtures: Path) -> None:
    src = CpuSource(Host(procfs_fixtures))
    first = src.collect(0.0)
    assert first["cpu.cores"] == 8 and "cpu.core.sys_pct" not in first


def test_net_on_a_recorded_tree(procfs_fixtures: Path) -> None:
    out = NetSource(Host(procfs_fixtures)).collect(0.0)
    assert out["softirq.net_rx"] == {cpu(0): 55919.0, cpu(1): 28694.0}
    processed = out["softnet.processed"]
    assert isinstance(processed, dict)
    # rows of 13 columns carry the CPU id; shorter rows (older kernels) use the row number
    assert processed[cpu(0)] == 0x00358FE3 and processed[cpu(1)] == 0x00953D1A
    assert set(processed) == {cpu(i) for i in range(5)}
    assert out["softnet.time_squeeze"][cpu(1)] == 0xB1  # type: ignore[index]
    dev = out["net.dev.rx_bytes"]
    assert isinstance(dev, dict) and dev[labels_of({"iface": "eth0"})] == 874354587.0
    assert out["net.dev.tx_packets"][labels_of({"iface": "vethf345468"})] == 5.0  # type: ignore[index]


def test_pressure_on_a_recorded_tree(procfs_fixtures: Path) -> None:
    out = PressureSource(Host(procfs_fixtures)).collect(0.0)
    assert out["pressure.io.full_avg300"] == 4.95
    assert out["pressure.cpu.some_total"] == 15.0


def test_cgroup_v2_dying_count_from_cgroup_stat(tmp_path: Path) -> None:
    # the recording keeps only the root's files; its 239 descendants, all with the memory
    # controller as on the incident's nodes, are laid out here (memory.current marks a
    # memcg before 6.11, whose cgroup.stat has no per-controller counts)
    shutil.copytree(FIX / "cgroup2", tmp_path, dirs_exist_ok=True)
    for i in range(239):
        pod = tmp_path / f"sys/fs/cgroup/kubepods.slice/pod{i}" if i else \
            tmp_path / "sys/fs/cgroup/kubepods.slice"
        pod.mkdir(parents=True, exist_ok=True)
        (pod / "memory.current").write_text("0\n")
    src = CgroupsSource(Host(tmp_path))
    assert src.unavailable() is None
    assert src.layout() is not None and src.layout().kind == "v2"  # type: ignore[union-attr]
    out = src.collect(0.0)
    assert out["memcg.dying"] == 68441 and out["memcg.live"] == 240
    assert out["memcg.hierarchy_version"] == 2


def test_hybrid_counts_dying_from_proc_cgroups_minus_directories() -> None:
    layout = detect_layout(FIX / "hybrid", FIX / "hybrid" / "proc")
    assert layout is not None and layout.kind == "hybrid" and layout.version == 1
    out = CgroupsSource(Host(FIX / "hybrid")).collect(0.0)
    assert out["memcg.live"] == 3 and out["memcg.dying"] == 68677


def test_ena_counter_set_through_the_ioctl_reply_parsers() -> None:
    """The documented ENA `ethtool -S` names and values, packed as the kernel packs the
    ETHTOOL_GSTRINGS and ETHTOOL_GSTATS replies, come back with the driver's names."""
    rows = [ln.split() for ln in (FIX / "ena_ethtool_stats.txt").read_text().splitlines()
            if ln and not ln.startswith("#")]
    names = [n for n, _ in rows]
    strings = struct.pack("III", 0x1B, 1, len(names)) + b"".join(
        n.encode().ljust(ETH_GSTRING_LEN, b"\0") for n in names)
    stats = struct.pack("II", 0x1D, len(rows)) + b"".join(
        struct.pack("Q", int(v)) for _, v in rows)
    got = dict(zip(parse_gstrings(strings), parse_gstats(stats), strict=True))
    assert got["wd_expired"] == 2 and got["pps_allowance_exceeded"] == 73
    assert got["queue_3_tx_missed_tx"] == 12
    with pytest.raises(ValueError):
        parse_gstats(stats[:-4])
    with pytest.raises(ValueError):
        parse_gstrings(strings[:-1])


def test_kmsg_recording_with_gaps_fragments_and_dictionary_lines(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    shutil.copy(FIX / "kmsg.recording", tmp_path / "dev" / "kmsg")
    """A recording in the format of a kernel before 4.9 (the reset line printed as a 'c'
    fragment and a '+' one), with user-facility records allowed as in a recording."""
    src = KmsgSource(Host(tmp_path), KmsgSource.Config(
        replay=True, continuation="before-4.9", facilities=["kern", "user"]))
    out = src.collect(0.0)
    m = out["kmsg.matches"]
    assert isinstance(m, dict)
    for name in ("ena_tx_paused", "ena_tx_missing_completion", "ena_reset_triggered",
                 "ena_reset_completed"):  # the last was printed in two fragments
        assert m[labels_of({"pattern": name})] == 1, name
    assert m[labels_of({"pattern": "oom_kill"})] == 0
    assert out["kmsg.records"] == 8  # the line that is not a record was read, and skipped
    assert out["kmsg.skipped"][labels_of({"reason": "header"})] == 1  # type: ignore[index]
    assert out["kmsg.lost"] == 2
    src.close()


def test_systemctl_show_output() -> None:
    units = parse_show((FIX / "systemctl-show.txt").read_text())
    assert [u["Id"] for u in units] == ["ecs.service", "kubelet.service",
                                        "nvidia-persistenced.service",
                                        "systemd-tmpfiles-clean.service"]
    assert units[0]["NRestarts"] == "68412" and units[0]["SubState"] == "auto-restart"


def test_systemd_absent_means_unavailable_with_a_reason(tmp_path: Path) -> None:
    src = SystemdSource(Host(tmp_path), SystemdSource.Config(systemctl=[str(tmp_path / "nope")]))
    why = src.unavailable()
    # auto: the private socket first (none under this root), then systemctl: both said,
    # in words (before: "[Errno 2] No such file or directory", on every command's stderr)
    assert why == (f"cannot talk to systemd on {tmp_path}/run/systemd/private: No such "
                   f"file or directory; {tmp_path / 'nope'} not found")


# -- garbage, truncated and empty files --------------------------------------------------

CASES: list[tuple[type[Source[Any]], str]] = [
    (CpuSource, "proc/stat"),
    (NetSource, "proc/softirqs"),
    (NetSource, "proc/net/softnet_stat"),
    (NetSource, "proc/net/dev"),
    (PressureSource, "proc/pressure/cpu"),
]
BAD = {
    "garbage": "\x00\xff garbage ) ( ;;; 12 x\n" * 20,
    "empty": "",
    "truncated": None,  # the first 37 bytes of the real file
}


@pytest.mark.parametrize(("source", "rel"), CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("kind", list(BAD))
def test_bad_files_are_a_clean_error_and_no_value(
        procfs_fixtures: Path, tmp_path: Path, source: type[Source[Any]], rel: str,
        kind: str) -> None:
    root = tmp_path / "root"
    shutil.copytree(procfs_fixtures, root)
    target = root / rel
    text = BAD[kind]
    target.write_text(target.read_text()[:37] if text is None else text, errors="replace")
    src = source(Host(root))
    coll = Collector(Host(root), [src])
    snap = coll.collect(0.0)
    coll.collect(1.0)
    assert source.name in snap.errors, snap.values
    assert all(spec.name not in snap.values for spec in source.specs)


def test_bad_cgroup_files_are_a_clean_error(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(FIX / "cgroup2", root)
    (root / "sys/fs/cgroup/cgroup.stat").write_text("nr_descendants lots\n")
    snap = Collector(Host(root), [CgroupsSource(Host(root))]).collect(0.0)
    assert "cgroups" in snap.errors and "memcg.dying" not in snap.values


def test_garbage_proc_stat_of_a_process_is_skipped_not_fatal(
        procfs_fixtures: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(procfs_fixtures, root)
    (root / "proc/27079/stat").write_text("27079 (trunc")
    snap = Collector(Host(root), [ProcessesSource(Host(root))]).collect(0.0)
    assert "processes" in snap.errors  # a malformed stat is an error, not a silent zero


def test_kmsg_drain_is_bounded_under_a_flood(tmp_path: Path) -> None:
    """A flood is read at most max_records_per_drain records per drain, so one tick's
    work stays bounded; the rest is read by later drains, not dropped."""
    (tmp_path / "dev").mkdir()
    lines = [f"6,{i},{i},-;flood line {i}\n" for i in range(2500)]
    lines[-1] = "4,2499,2499,-;ena 0000:20:03.0 eth0: Trigger reset is on\n"
    (tmp_path / "dev" / "kmsg").write_text("".join(lines))
    src = KmsgSource(Host(tmp_path), KmsgSource.Config(replay=True, max_records_per_drain=1))
    src.drain(0.0)
    assert src.records < 400  # one read of a recording returns up to 8 KiB (~315 lines)
    while src.drain(1.0) or src.records < 2500:
        pass
    assert src.records == 2500
    assert src.counts["ena_reset_triggered"] == 1
    src.close()
