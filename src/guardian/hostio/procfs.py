"""/proc/<pid>/stat and the process facts guardian derives from it, for the sources and
the actions alike."""

from __future__ import annotations

import os
import re
from collections.abc import Container, Iterable, Iterator
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


def parse_proc_stat(text: str | bytes) -> ProcStat:
    """Parse /proc/<pid>/stat; the comm may contain spaces and parentheses."""
    raw = text.encode("utf-8", errors="surrogateescape") if isinstance(text, str) else text
    lpar = raw.find(b"(")
    rpar = raw.rfind(b")")
    if lpar < 0 or rpar < lpar:
        raise ValueError("/proc/<pid>/stat without a (comm)")
    rest = raw[rpar + 2:].split(None, 20)  # the fields up to starttime, no further
    if len(rest) < 20:
        raise ValueError(f"/proc/<pid>/stat has {len(rest) + 2} fields, expected 22 or more")
    return _new_stat(ProcStat, (  # tuple.__new__: no Python frame per process
        int(raw[:lpar]), raw[lpar + 1:rpar].decode("utf-8", errors="replace"),
        rest[0].decode("ascii", errors="replace"), int(rest[1]), int(rest[6]),
        int(rest[11]), int(rest[12]), int(rest[19]), int(rest[17])))


_new_stat = tuple.__new__


def pids(proc: Path) -> list[int]:
    return [int(name) for name in os.listdir(proc) if name.isdigit()]


def read_proc_stat(proc: Path | str, pid: int) -> ProcStat | None:
    """The stat of one process, or None when it exited meanwhile."""
    raw = _read_stat(f"{proc}/{pid}/stat")
    return None if raw is None else parse_proc_stat(raw)


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
    return _stats(f"{proc}/", os.listdir(proc), strict, ())


def _stats(base: str, names: Iterable[str], strict: bool,
           skip: Container[str]) -> Iterator[ProcStat]:
    flags = os.O_RDONLY | os.O_CLOEXEC
    for name in names:
        if not name.isdigit() or name in skip:
            continue
        try:  # _read_stat, inlined: this loop runs once per process per tick
            fd = os.open(base + name + "/stat", flags)
        except (FileNotFoundError, ProcessLookupError):
            continue
        try:
            raw = os.read(fd, 4096)
        except ProcessLookupError:
            continue
        finally:
            os.close(fd)
        try:
            yield parse_proc_stat(raw)
        except ValueError:
            if strict:
                raise


# Kernel threads whose system time is the reclaim cost itself (page reclaim, compaction):
# kernel-time-hog names them. On 6.1+ the cost of many dying memcgs is in reclaim, which
# visits every memcg; kswapd spends it. One of each per NUMA node: cheap to read each tick.
RECLAIM_THREADS = ("kswapd", "kcompactd")


class ProcessTable:
    """Scans /proc/<pid>/stat for the processes, reading a kernel thread only when it is
    first seen: a kernel thread stays one while it lives, so afterwards only its PID's
    presence is checked. Every ``recheck`` scans all are read again, which also catches
    a kernel thread's PID reused by a process (that takes a PID-space wrap meanwhile).
    Reclaim's kernel threads (:data:`RECLAIM_THREADS`) are read every scan and kept in
    ``reclaim_threads``: their system time is wanted."""

    def __init__(self, proc: Path, recheck: int = 60) -> None:
        self.proc = proc
        self.recheck = recheck
        self.kernel_threads: set[str] = set()
        self.reclaim_threads: list[ProcStat] = []
        self.scans = 0

    def scan(self) -> tuple[list[ProcStat], int]:
        """The processes (kernel threads left out) and the number of kernel threads."""
        if self.scans % self.recheck == 0:
            self.kernel_threads = set()
        self.scans += 1
        names = os.listdir(self.proc)
        known = self.kernel_threads
        if known:
            known.intersection_update(names)  # forget those that exited
        out: list[ProcStat] = []
        reclaim: list[ProcStat] = []
        for st in _stats(f"{self.proc}/", names, True, known):
            if not st.flags & PF_KTHREAD:
                out.append(st)
            elif st.comm.startswith(RECLAIM_THREADS):
                reclaim.append(st)  # not remembered: read again next scan
            else:
                known.add(str(st.pid))
        self.reclaim_threads = reclaim
        return out, len(known) + len(reclaim)


def uptime(proc: Path) -> float:
    with open(proc / "uptime") as f:
        return float(f.read().split()[0])


_SYSTEM_UNIT = re.compile(r"^/system\.slice/([A-Za-z0-9:_.@\\-]+\.service)(?:/|$)")


def real_uid(proc: Path, pid: int) -> int | None:
    """A process's real UID, from its status (``/proc/<pid>`` itself of a non-dumpable
    process is root's whoever runs it); None when it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return None


def _cgroup_lines(proc: Path, pid: int) -> list[str]:
    """The lines of /proc/<pid>/cgroup, ``hierarchy-ID:controllers:path`` (v1 and v2
    alike). Raises OSError."""
    return (proc / str(pid) / "cgroup").read_text().splitlines()


def cgroup_paths(proc: Path, pid: int) -> list[str]:
    """The cgroup of a process in each hierarchy; none when it cannot be read."""
    try:
        lines = _cgroup_lines(proc, pid)
    except OSError:
        return []
    return [line.split(":", 2)[2] for line in lines if line.count(":") >= 2]


def cgroup_of(proc: Path, pid: int) -> str:
    """The cgroup a process runs in ("/system.slice/kubelet.service", a pod's scope): the
    unified hierarchy's, else systemd's named one, else the first; "?" when unreadable.
    Only root (or a delegating service) places a process, so it is not the process's to
    choose, unlike its name."""
    try:
        lines = _cgroup_lines(proc, pid)
    except OSError:
        return "?"
    paths = {f[1]: f[2] for f in (line.split(":", 2) for line in lines) if len(f) == 3}
    return paths.get("") or paths.get("name=systemd") or next(iter(paths.values()), "?")


def system_unit_of(proc: Path, pid: int) -> str | None:
    """The system service a root-owned process runs in (``containerd.service``), from
    its cgroup: what only root can choose, unlike its name. None for a process of another
    user, one outside ``system.slice``, or one that is gone."""
    if real_uid(proc, pid) != 0:
        return None
    try:
        lines = _cgroup_lines(proc, pid)
    except OSError:
        return None
    for line in lines:  # "hierarchy-ID:controllers:path", v1 and v2 alike
        found = _SYSTEM_UNIT.match(line.split(":", 2)[-1])
        if found:
            return found[1]
    return None


def owner_uid(proc: Path, pid: int) -> int:
    """The UID owning ``/proc/<pid>`` (root's for a non-dumpable process, whoever runs it:
    :func:`real_uid` reads the real one). Raises OSError when it is gone."""
    return os.stat(proc / str(pid)).st_uid


# A pod's cgroup as the kubelet names it (kubernetes pkg/kubelet/cm/
# pod_container_manager_linux.go: podCgroupNamePrefix "pod" + the pod's UID, under
# kubepods[/burstable|/besteffort]; with the systemd driver, cgroup_manager_linux.go's
# escapeSystemdCgroupName turns each "-" of the UID into "_" and the name into
# kubepods-<qos>-pod<uid>.slice).
_POD = re.compile(r"(?:^|/)(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_]"
                  r"[0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?=/|$)")


def pod_uid_of(proc: Path, pid: int) -> str | None:
    """The UID of the Kubernetes pod a process runs in, from its cgroup (only the kubelet
    places a process there, unlike its name); None for a process outside any pod, or one
    that is gone."""
    for path in cgroup_paths(proc, pid):
        if "kubepods" in path and (found := _POD.search(path)):
            return found[1].replace("_", "-")
    return None

