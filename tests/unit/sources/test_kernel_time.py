"""Who burns kernel time includes reclaim's kernel threads (issue 26): on 6.1+ the cost of
many dying memcgs is in page reclaim, which visits every memcg, and kswapd spends it
(14.8 s to read 2 GiB with 10k dying, kswapd0 burning 6 s of CPU). The /proc entries of a
real kswapd0 and kcompactd0 are recorded in tests/fixtures/kthreads (see its README)."""

from __future__ import annotations

import shutil
from pathlib import Path

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.hostio.procfs import CLK_TCK, parse_proc_stat
from guardian.sources.processes import ProcessesSource
from tests.support.checkout import FIXTURES

FIX = FIXTURES / "kthreads"


def add_stime(stat: Path, ticks: int) -> None:
    text = stat.read_text()
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    fields[12] = str(int(fields[12]) + ticks)  # stime: field 15 of proc(5)
    stat.write_text(f"{head}) {' '.join(fields)}\n")


def test_kswapd_burning_kernel_time_is_named(tmp_path: Path) -> None:
    shutil.copytree(FIX, tmp_path, dirs_exist_ok=True)
    kswapd = tmp_path / "proc/47/stat"
    assert parse_proc_stat(kswapd.read_text()).is_kernel_thread
    src = ProcessesSource(Host(tmp_path))
    first = src.collect(100.0)
    assert first["processes.kernel_threads"] == 2 and first["processes.total"] == 2
    add_stime(kswapd, 9 * CLK_TCK)  # 9 s of system time in 10 s
    add_stime(tmp_path / "proc/38/stat", CLK_TCK // 10)
    top = src.collect(110.0)["processes.top_system_cpu_pct"]
    assert top == {
        labels_of({"comm": "kswapd0", "uid": "0", "cgroup": "/"}): 90.0,
        labels_of({"comm": "kcompactd0", "uid": "0", "cgroup": "/"}): 1.0,
    }
    # read every scan (not once, like the other kernel threads): still counted once
    again = src.collect(120.0)
    assert again["processes.kernel_threads"] == 2 and again["processes.top_system_cpu_pct"] == {}


def test_this_kernels_kswapd_is_read_every_scan() -> None:
    """The live kernel: its kswapd threads are in the kernel-time scan."""
    src = ProcessesSource(Host())
    src.collect(0.0)
    assert any(st.comm.startswith("kswapd") for st in src.table.reclaim_threads)
