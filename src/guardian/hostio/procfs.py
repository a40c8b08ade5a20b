"""/proc/<pid>/stat and the process facts guardian derives from it, for the sources and
the actions alike."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

PF_KTHREAD = 0x00200000
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcStat(NamedTuple):
    """The fields of /proc/<pid>/stat that guardian uses (a tuple: made per process per
    tick, so it must be cheap)."""

    pid: int
    comm: str
    state: str
    ppid: int
    flags: int
    utime: int
    stime: int
    starttime: int
    threads: int = 1

    @property
    def is_kernel_thread(self) -> bool:
        # PF_KTHREAD only: "parent is PID 2" holds in the host PID namespace alone
        return bool(self.flags & PF_KTHREAD)

    @property
    def is_zombie(self) -> bool:
        """Exited and not yet reaped by its parent. A kernel thread never counts, nor a
        thread-group leader that called pthread_exit while its other threads run: it
        shows ``Z`` too, but the process lives."""
        return self.state == "Z" and self.threads <= 1 and not self.is_kernel_thread


def zombies_by_parent(stats: Iterable[ProcStat]) -> dict[int, list[ProcStat]]:
    """Zombies grouped by the PID of the parent that has not reaped them."""
    out: dict[int, list[ProcStat]] = {}
    for st in stats:
        if st.is_zombie:
            out.setdefault(st.ppid, []).append(st)
    return out


def parse_proc_stat(text: str) -> ProcStat:
    """Parse /proc/<pid>/stat; the comm may contain spaces and parentheses."""
    lpar = text.index("(")
    rpar = text.rindex(")")
    pid = int(text[:lpar])
    comm = text[lpar + 1:rpar]
    rest = text[rpar + 2:].split(None, 20)  # the fields up to starttime, no further
    if len(rest) < 20:
        raise ValueError(f"/proc/{pid}/stat has {len(rest) + 2} fields, expected 22 or more")
    return ProcStat(pid, comm, rest[0], int(rest[1]), int(rest[6]), int(rest[11]),
                    int(rest[12]), int(rest[19]), int(rest[17]))


def pids(proc: Path) -> list[int]:
    return [int(name) for name in os.listdir(proc) if name.isdigit()]


def read_proc_stat(proc: Path | str, pid: int) -> ProcStat | None:
    """The stat of one process, or None when it exited meanwhile."""
    raw = _read_stat(f"{proc}/{pid}/stat")
    return None if raw is None else parse_proc_stat(raw.decode("utf-8", errors="replace"))


def _read_stat(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        return os.read(fd, 4096)
    except ProcessLookupError:  # exited between open and read
        return None
    finally:
        os.close(fd)


def all_stats(proc: Path, strict: bool = True) -> Iterator[ProcStat]:
    """The stat of every process; those that exit meanwhile are skipped, and so are
    malformed ones unless ``strict`` (then they raise ValueError)."""
    base = str(proc)
    for pid in pids(proc):
        raw = _read_stat(f"{base}/{pid}/stat")
        if raw is None:
            continue
        try:
            yield parse_proc_stat(raw.decode("utf-8", errors="replace"))
        except ValueError:
            if strict:
                raise


def uptime(proc: Path) -> float:
    with open(proc / "uptime") as f:
        return float(f.read().split()[0])
