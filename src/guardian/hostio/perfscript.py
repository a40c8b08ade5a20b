"""``perf script`` output folded into stacks: the collapsed format every flame-graph tool
reads (``comm;outermost;…;innermost COUNT``), kernel frames marked ``_[k]`` as FlameGraph's
``stackcollapse-perf.pl --kernel`` marks them. One reader for a profile taken on demand
(``profile.py``) and for the flight recorder's ring (``flight.py``)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterable

KERNEL_SUFFIX = "_[k]"  # FlameGraph's mark of a kernel frame (stackcollapse-perf --kernel)
# the DSOs perf gives a user-space address it cannot place
_USER_BRACKETS = ("[unknown]", "[vdso]", "[vsyscall]", "[stack]", "[heap]", "[anon]",
                  "[uprobes]", "[vectors]", "[sigpage]")


def fold_perf_script(lines: Iterable[str]) -> tuple[Counter[str] | None, float]:
    """``perf script`` output (``-F comm,tid[,time],ip,sym,dso``, or ``pid/tid``) folded:
    each stack (``comm``, then its frames from the root, kernel frames ending in ``_[k]``)
    with its count, and the seconds between the first and last sample. None for the
    stacks when ``lines`` was cut short (its ``timed_out`` is true)."""
    stacks: Counter[str] = Counter()
    comm = ""
    frames: list[str] = []
    first = last = None

    def flush() -> None:
        if comm:
            key = ";".join([comm, *reversed(frames)])
            stacks[key] += 1

    for raw in lines:
        line = raw.rstrip()
        if not line:
            flush()
            comm, frames = "", []
            continue
        if raw[0] not in " \t":  # a sample's header: comm tid time:
            flush()
            frames = []
            comm, stamp = _header(line)
            if stamp is not None:
                first = stamp if first is None else first
                last = stamp
            continue
        frame = _frame(line)
        if frame:
            frames.append(frame)
    flush()
    if getattr(lines, "timed_out", False):
        return None, 0.0
    return stacks, (last - first) if first is not None and last is not None else 0.0


def _header(line: str) -> tuple[str, float | None]:
    """(comm, time) of ``comm tid time:``; comm may hold spaces, and ';' is a separator
    in the folded format (so it becomes ':')."""
    parts = line.split()
    stamp = None
    if parts and parts[-1].endswith(":"):
        with contextlib.suppress(ValueError):
            stamp = float(parts[-1][:-1])
        parts = parts[:-1]
    if len(parts) >= 2 and parts[-1].replace("/", "").isdigit():
        parts = parts[:-1]
    comm = " ".join(parts) if parts else "[unknown]"
    return comm.replace(";", ":"), stamp


def _frame(line: str) -> str:
    """One ``addr sym (dso)`` line as a frame name: the symbol (or ``[dso]`` where there is
    none), ``_[k]`` after a kernel one."""
    text = line.strip()
    addr, _, rest = text.partition(" ")
    dso = ""
    if rest.endswith(")") and " (" in rest:
        rest, _, dso = rest[:-1].rpartition(" (")
    sym = rest.strip() or "[unknown]"
    try:
        kernel = int(addr, 16) >= 1 << 63
    except ValueError:
        kernel = False
    kernel = kernel or dso.endswith("kernel.kallsyms]") or \
        (dso.startswith("[") and dso not in _USER_BRACKETS)
    if sym == "[unknown]" and dso and dso != "[unknown]":
        sym = dso if dso.startswith("[") else f"[{os.path.basename(dso)}]"
    sym = sym.replace(";", ":")
    return sym + KERNEL_SUFFIX if kernel else sym
