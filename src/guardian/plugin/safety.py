"""Targets guardian never acts on, whatever a rule says: PID 1, kernel threads, guardian
itself and its parent, and a configured protected set."""

from __future__ import annotations

import os
from collections.abc import Iterable
from fnmatch import fnmatchcase

from guardian.hostio.procfs import ProcStat

# Processes whose death takes the node or its workloads down with them. Actions that
# signal processes refuse them unless a rule's own `protect` list leaves them out.
DEFAULT_PROTECTED_COMMS = ("systemd", "init", "kubelet", "containerd", "dockerd", "sshd",
                           "dbus-daemon", "journald", "systemd-journal", "guardian")


def protected_reason(st: ProcStat, own_pid: int | None = None, own_ppid: int | None = None,
                     protect_comms: Iterable[str] = (), protect_pids: Iterable[int] = ()
                     ) -> str | None:
    """Why a process must not be signalled, or None when it may be."""
    me = os.getpid() if own_pid is None else own_pid
    parent = os.getppid() if own_ppid is None else own_ppid
    if st.pid == 1:
        return "PID 1 is never a target"
    if st.is_kernel_thread:
        return "kernel threads are never targets"
    if st.pid == me:
        return "guardian itself is never a target"
    if st.pid == parent:
        return "guardian's parent is never a target"
    if st.pid in set(protect_pids):
        return "in the protected PID set"
    for glob in protect_comms:
        if fnmatchcase(st.comm, glob):
            return f"comm {st.comm!r} is protected ({glob!r})"
    return None


def selected(value: str, allow: Iterable[str], deny: Iterable[str] = ()) -> bool:
    """True when ``value`` matches an allow glob and no deny glob."""
    return any(fnmatchcase(value, g) for g in allow) and not any(
        fnmatchcase(value, g) for g in deny)
