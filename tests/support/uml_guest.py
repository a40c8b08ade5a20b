"""Helpers for the scripts :mod:`tests.uml` runs inside the user-mode 6.1 kernel (as its
root, on its own cgroup2 hierarchy): make memcgs that die with page cache, and report."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from guardian.actions.memcg import MemcgRelease
from guardian.core.snapshot import Snapshot
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext, Outcome
from guardian.policy.loader import load_rules
from tests.support.checkout import REPO

CG = Path("/sys/fs/cgroup")
RULES = REPO / "rules"


def stat(cg: Path = CG) -> dict[str, int]:
    """The kernel's cgroup.stat."""
    return {k: int(v) for k, v in (ln.split() for ln in (cg / "cgroup.stat").read_text()
                                    .splitlines())}


def steady_dying(quiet: float = 0.3) -> int:
    """nr_dying_descendants once it holds for ``quiet`` seconds (the last memcg
    make_dying removes has no page cache: the kernel frees it shortly after)."""
    last = stat()["nr_dying_descendants"]
    while True:
        time.sleep(quiet)
        now = stat()["nr_dying_descendants"]
        if now == last:
            return now
        last = now


def cgroup(path: Path, controllers: str = "+memory +io") -> Path:
    """A live cgroup whose children get ``controllers``."""
    path.mkdir()
    if controllers:
        (path / "cgroup.subtree_control").write_text(controllers)
    return path


def enter(cg: Path) -> None:
    (cg / "cgroup.procs").write_text(str(os.getpid()))


def make_dying(parent: Path, files: Path, n: int, size: int = 8192) -> None:
    """``n`` memcgs under ``parent`` that die with dirty page cache: this process enters
    each in turn, writes a new file (charged to it), moves on and removes it."""
    files.mkdir(exist_ok=True)
    for i in range(n + 1):
        here = parent / f"m{i}"
        here.mkdir()
        enter(here)
        if i:
            (parent / f"m{i - 1}").rmdir()
        if i < n:
            (files / f"f{i}").write_bytes(b"x" * size)
    enter(CG)
    (parent / f"m{n}").rmdir()


def fill_cache(cg: Path, path: Path, mib: int) -> None:
    """``mib`` MiB of clean page cache charged to ``cg`` (which stays live)."""
    enter(cg)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(b"y" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
    enter(CG)


def file_bytes(cg: Path) -> int:
    """Page cache charged to ``cg`` (memory.stat's ``file``)."""
    for line in (cg / "memory.stat").read_text().splitlines():
        k, v = line.split()
        if k == "file":
            return int(v)
    raise LookupError("no file line in memory.stat")


def meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise LookupError(key)


def fast_writeback() -> None:
    """The flusher writes back pages dirty for 1 s (default 30 s), every 0.2 s: the state
    a node is in minutes after a crash-looping unit died, reached in seconds."""
    Path("/proc/sys/vm/dirty_expire_centisecs").write_text("100")
    Path("/proc/sys/vm/dirty_writeback_centisecs").write_text("20")


def wait_written_back(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while meminfo_kb("Dirty") + meminfo_kb("Writeback") > 64:
        if time.monotonic() > deadline:
            raise TimeoutError(f"still dirty: {meminfo_kb('Dirty')} kB")
        time.sleep(0.2)


def shipped_release() -> MemcgRelease:
    """The memcg.release action of the shipped dying-memcgs rule, parameters as shipped."""
    rules = load_rules([RULES]).rules
    [rule] = [r for r in rules if r.spec.name == "dying-memcgs"]
    [bound] = [a for a in rule.actions if a.use == "memcg.release"]
    assert isinstance(bound.action, MemcgRelease)
    return bound.action


def run(action: MemcgRelease) -> tuple[list[str], list[str], Outcome]:
    """Plan and apply on this (the guest's) host: (steps, refusals, outcome)."""
    ctx = ActionContext("dying-memcgs", Snapshot(0.0, {}), Host(), dry_run=False)
    plan = action.plan(ctx)
    steps = [f"{s.target}: {s.change}" for s in plan.steps]
    if plan.refused:
        return steps, plan.refused, Outcome(ok=False, error="refused")
    return steps, [], action.apply(plan, ctx)


def report(**values: Any) -> None:
    print(json.dumps(values, default=str), flush=True)
