"""guardian's memcg code on a real cgroup v2 hierarchy: Linux 6.1 (Amazon Linux 2023's
line) booted with user-mode-linux (tests/support/uml.py), an ext4 disk for real page cache and
writeback (issue 26). This VM's own kernel has the memory controller on cgroup v1 only.

Ground truth: the kernel's ``cgroup.stat`` (Documentation/admin-guide/cgroup-v2.rst), read
beside guardian's counts; why memcgs that died dirty outlive their pages:
cleanup_offline_cgwbs_workfn in mm/backing-dev.c (6.1) skips a writeback structure that
still has dirty I/O when its memcg goes offline and retries only at the next offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.uml import boot, need_uml

pytestmark = pytest.mark.os_integration

DROP_CACHES = r"""
import sys
from pathlib import Path
from guardian.actions.memcg import MemcgParams, MemcgRelease
from guardian.hostio.host import Host
from guardian.sources.cgroups import CgroupsSource
from tests.support.uml_guest import *

disk = Path(sys.argv[1])
fast_writeback()
# counts: memcgs, live and dying, beside cgroups without the memory controller
leak = cgroup(CG / "leak.slice")
for i in range(3):
    (leak / f"live{i}").mkdir()
plain = cgroup(CG / "plain", "")  # its children get no controller: cgroups, not memcgs
(plain / "a").mkdir()
(plain / "b").mkdir()
make_dying(leak, disk / "a", 1000)
src = CgroupsSource(Host())
kernel_before = stat()  # the kernel frees some meanwhile (the last, clean one): bracket
ours = src.collect(0.0)
report(phase="counts", unavailable=src.unavailable(), guardian=ours, kernel=kernel_before,
       kernel_after=stat(), without_memory=2)

# the shipped remedy, minutes later: the flusher has written the pages back
wait_written_back()
kernel_before = steady_dying()
steps, refused, out = run(shipped_release())
report(phase="shipped", steps=steps, refused=refused, outcome=out.to_dict(),
       kernel_before=kernel_before, kernel_after=stat()["nr_dying_descendants"])

# died dirty and released at once: sync_first writes them back first
make_dying(leak, disk / "b", 300)
kernel_before = steady_dying()
steps, refused, out = run(MemcgRelease(MemcgParams(sync_first=True)))
report(phase="sync_first", steps=steps, refused=refused, outcome=out.to_dict(),
       kernel_before=kernel_before, kernel_after=stat()["nr_dying_descendants"])
"""

RECLAIM = r"""
import errno, os, sys
from pathlib import Path
from guardian.actions.memcg import MemcgParams, MemcgRelease
from tests.support.uml_guest import *

disk = Path(sys.argv[1])
fast_writeback()
other = cgroup(CG / "other.slice", "")
fill_cache(other, disk / "big", 64)
work = cgroup(CG / "work.slice")
inner = cgroup(work / "leaky.service")
make_dying(inner, disk / "w", 500)
wait_written_back()
cache_before = file_bytes(other)
kernel_before = steady_dying()
steps, refused, out = run(MemcgRelease(MemcgParams(method="reclaim")))
report(phase="reclaim", steps=steps, refused=refused, outcome=out.to_dict(),
       kernel_before=kernel_before, kernel_after=stat()["nr_dying_descendants"],
       cache_before=cache_before, cache_after=file_bytes(other))

# the kernel's answer to more than a cgroup has: EAGAIN (cgroup-v2.rst, memory.reclaim)
fd = os.open(inner / "memory.reclaim", os.O_WRONLY)
try:
    os.write(fd, b"1G")
    eagain = False
except OSError as exc:
    eagain = exc.errno == errno.EAGAIN
finally:
    os.close(fd)
steps, refused, out = run(MemcgRelease(MemcgParams(method="reclaim", amount="1G",
                                                   cgroup="work.slice")))
report(phase="eagain", kernel_eagain=eagain, steps=steps, outcome=out.to_dict())

# dying memcgs directly under the root: the default would be the whole machine
make_dying(CG, disk / "r", 20)
steps, refused, out = run(MemcgRelease(MemcgParams(method="reclaim")))
report(phase="at_root", refused=refused, cache_after=file_bytes(other))
"""


def _phases(work: Path, script: str) -> dict[str, dict[str, Any]]:
    need_uml()
    booted = boot(work, script)
    assert booted.rc == 0, f"guest failed ({booted.seconds:.1f} s):\n{booted.output}\n" \
                           f"{booted.console[-3000:]}"
    lines = [json.loads(ln) for ln in booted.output.splitlines() if ln.startswith("{")]
    return {ln["phase"]: ln for ln in lines}


@pytest.fixture(scope="module")
def dropped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _phases(tmp_path_factory.mktemp("uml-drop"), DROP_CACHES)


@pytest.fixture(scope="module")
def reclaimed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _phases(tmp_path_factory.mktemp("uml-reclaim"), RECLAIM)


def test_counts_equal_the_kernels(dropped: dict[str, dict[str, Any]]) -> None:
    """memcg.dying is cgroup.stat's nr_dying_descendants; memcg.live counts memory
    cgroups: the kernel's cgroups (nr_descendants, the root too) less the two made
    without the memory controller. 6.1 has no nr_subsys_memory."""
    got = dropped["counts"]
    kernel, ours, after = got["kernel"], got["guardian"], got["kernel_after"]
    assert got["unavailable"] is None and ours["memcg.hierarchy_version"] == 2
    assert "nr_subsys_memory" not in kernel
    assert kernel["nr_dying_descendants"] >= ours["memcg.dying"] \
        >= after["nr_dying_descendants"] >= 1000, got
    assert ours["memcg.live"] == kernel["nr_descendants"] + 1 - got["without_memory"]


def claims_what_the_kernel_counts(got: dict[str, Any]) -> bool:
    """The outcome's counts are the kernel's, read just before planning and just after
    the outcome (a few memcgs may go between the reads: the kernel frees asynchronously)."""
    data = got["outcome"]["data"]
    slack = 0.02 * got["kernel_before"]
    return bool(data["dying_before"] == got["kernel_before"]) and \
        abs(data["dying_after"] - got["kernel_after"]) <= slack and \
        abs(data["released"] - (got["kernel_before"] - got["kernel_after"])) <= slack


# Left behind: memcgs that first dirtied ext4 metadata (inode table blocks, 16 inodes to a
# 4 KiB block, and directory blocks) in the block device's cache, which the journal still
# holds; they go once it has checkpointed them. About one memcg in 14 here.
RESIDUE = 0.1


def test_the_shipped_remedy_frees_memcgs_that_died_dirty(
        dropped: dict[str, dict[str, Any]]) -> None:
    """Issue 26: with drop_caches=1 (the shipped remedy before) none of them went: a
    clean inode still pins the writeback structure of the memcg that dirtied it. The
    shipped parameters now write 3 on cgroup v2, and what the outcome claims is what the
    kernel counts."""
    got = dropped["shipped"]
    out = got["outcome"]
    assert got["steps"][-1].endswith("write 3: free clean page cache, unused dentries "
                                     "and inodes"), got["steps"]
    assert out["ok"] and out["verified"], out
    assert claims_what_the_kernel_counts(got)
    assert got["kernel_after"] <= RESIDUE * got["kernel_before"], got


def test_sync_first_frees_memcgs_still_dirty(dropped: dict[str, dict[str, Any]]) -> None:
    got = dropped["sync_first"]
    out = got["outcome"]
    assert out["ok"] and out["verified"], out
    assert claims_what_the_kernel_counts(got)
    assert got["kernel_after"] <= RESIDUE * got["kernel_before"] + 100, got


def test_reclaim_is_scoped_to_the_leaking_cgroup(reclaimed: dict[str, dict[str, Any]]) -> None:
    """Issue 26: reclaim's defaults (the root, 1G) reclaimed from the whole machine: a live
    cgroup's page cache went to 0. By default it now reclaims from the deepest cgroup that
    holds all the dying memcgs, at most what that cgroup has."""
    got = reclaimed["reclaim"]
    out = got["outcome"]
    assert not got["refused"] and out["ok"], got
    assert out["data"]["cgroup"] == "/work.slice/leaky.service"
    assert got["steps"][0].startswith("/sys/fs/cgroup/work.slice/leaky.service/"
                                      "memory.reclaim: write ")
    assert got["cache_after"] >= 0.9 * got["cache_before"] >= 0.9 * (64 << 20), got
    # memory.reclaim alone freed 45 to 75% of them in runs here: inodes kept pinning the
    # rest. The offline child cgroup after it makes the kernel move those inodes to the
    # parent's writeback structure (cleanup_offline_cgwbs_workfn, mm/backing-dev.c)
    assert got["steps"][1].startswith("/sys/fs/cgroup/work.slice/leaky.service/"
                                      "guardian-wb-cleanup-"), got["steps"]
    assert out["data"]["writeback_cleanup"] == "triggered"
    assert out["verified"] and got["kernel_after"] <= RESIDUE * got["kernel_before"], got
    assert claims_what_the_kernel_counts(got)


def test_reclaim_eagain_is_a_short_reclaim_not_a_failure(
        reclaimed: dict[str, dict[str, Any]]) -> None:
    got = reclaimed["eagain"]
    assert got["kernel_eagain"], "the kernel no longer answers EAGAIN; revisit the doc"
    out = got["outcome"]
    assert out["ok"] and not out["error"], out
    # capped at the cgroup's memory.current: far less than the 1G asked for
    assert not got["steps"][0].endswith("write 1G"), got["steps"]


def test_reclaim_from_the_whole_machine_is_refused_unless_asked(
        reclaimed: dict[str, dict[str, Any]]) -> None:
    got = reclaimed["at_root"]
    assert got["refused"] and "whole machine" in got["refused"][0], got
