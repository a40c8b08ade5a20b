"""Where the kernel spends its time: a bounded CPU profile with kernel and user stacks,
from the kernel's own profiler (``perf record -g``, then ``perf script``, folded here) or,
with nothing installed, by sampling ``/proc/<pid>/task/<tid>/stack`` and ``wchan`` of the
tasks that burn system time.

Both give *folded* stacks, the collapsed format every flame-graph tool reads (one line per
distinct stack: ``comm;outermost;…;innermost COUNT``), kernel frames marked ``_[k]`` as
FlameGraph's ``stackcollapse-perf.pl --kernel`` marks them. Which tasks are sampled comes
from root-read /proc alone (system time deltas), never from a file a user can write.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from guardian.hostio.perfscript import KERNEL_SUFFIX, fold_perf_script
from guardian.hostio.procfs import parse_proc_stat
from guardian.hostio.programs import MINIMAL_ENV, cannot_run, find_program, run_bounded

KERNEL = KERNEL_SUFFIX
CAP_SYS_ADMIN, CAP_SYSLOG, CAP_PERFMON = 21, 34, 38
SCRIPT_FIELDS = "comm,pid,tid,ip,sym,dso"


def effective_caps(proc: Path) -> int:
    """This process's effective capability set (``CapEff`` of /proc/self/status)."""
    try:
        for line in (proc / "self" / "status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _has(caps: int, cap: int) -> bool:
    return bool(caps >> cap & 1)


def _sysctl(proc: Path, name: str) -> int | None:
    try:
        return int((proc / "sys" / "kernel" / name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def resolve_perf(perf: str) -> str | None:
    """The perf program to run (an absolute path, or a name on the minimal PATH)."""
    if perf.startswith("/"):
        return None if cannot_run(perf) else perf
    return find_program(perf, MINIMAL_ENV["PATH"])


def perf_refusals(perf: str, proc: Path, caps: int | None = None) -> list[str]:
    """Why ``perf record -a``/``-C`` cannot profile this host, in words ([] when it can):
    perf not found, or ``perf_event_paranoid`` above 0 without CAP_PERFMON or
    CAP_SYS_ADMIN (a CPU-wide profile needs one of them, or paranoid ≤ 0)."""
    out = []
    if resolve_perf(perf) is None:
        out.append(f"perf ({perf}) is not installed or not executable (Debian: "
                   "linux-perf)")
    caps = effective_caps(proc) if caps is None else caps
    paranoid = _sysctl(proc, "perf_event_paranoid")
    if paranoid is None:
        out.append("the kernel has no perf events (no /proc/sys/kernel/perf_event_paranoid)")
    elif paranoid > 0 and not (_has(caps, CAP_PERFMON) or _has(caps, CAP_SYS_ADMIN)):
        out.append(f"perf_event_paranoid is {paranoid} and guardian has neither "
                   "CAP_PERFMON nor CAP_SYS_ADMIN: a CPU-wide profile needs one of them "
                   "(or perf_event_paranoid ≤ 0)")
    return out


def kernel_symbols_hidden(proc: Path, caps: int | None = None) -> str | None:
    """Why kernel frames would show as bare addresses (``kernel.kptr_restrict``), or None
    when /proc/kallsyms names them to guardian."""
    caps = effective_caps(proc) if caps is None else caps
    restrict = _sysctl(proc, "kptr_restrict")
    if restrict == 2:
        return "kptr_restrict is 2: kernel symbols are hidden from everyone, kernel " \
               "frames are bare addresses (sysctl kernel.kptr_restrict=1 and CAP_SYSLOG " \
               "name them)"
    if restrict == 1 and not _has(caps, CAP_SYSLOG):
        return "kptr_restrict is 1 and guardian lacks CAP_SYSLOG: kernel frames are " \
               "bare addresses"
    return None


def proc_stack_refusal(proc: Path, caps: int | None = None) -> str | None:
    """Why /proc/<pid>/stack cannot be read (it needs CAP_SYS_ADMIN), or None."""
    caps = effective_caps(proc) if caps is None else caps
    if not _has(caps, CAP_SYS_ADMIN):
        return "reading /proc/<pid>/stack needs CAP_SYS_ADMIN: only wchan (the function " \
               "a sleeping task waits in) is sampled"
    return None


# -- folding ------------------------------------------------------------------------------
def write_folded(path: Path, folded: Counter[str]) -> None:
    path.write_text("".join(f"{stack} {n}\n" for stack, n in sorted(folded.items())))


def read_folded(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            out[stack] += int(n)
    return out


# -- perf ---------------------------------------------------------------------------------
@dataclass
class Profile:
    """A profile taken: its method (``perf`` or ``proc-stack``), the folded stacks, and
    what went wrong or was left out."""

    method: str
    folded: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)
    tasks: list[dict[str, object]] = field(default_factory=list)  # the sampled tasks

    @property
    def samples(self) -> int:
        return sum(self.folded.values())


def perf_record_argv(perf: str, cores: list[int] | None, frequency: int, seconds: float,
                     data: Path) -> list[str]:
    """The ``perf record`` command: call graphs, ``-C`` the cores or ``-a`` every one, no
    build-id cache (nothing written outside the bundle), ``sleep`` bounding it."""
    where = ["-C", ",".join(str(c) for c in sorted(set(cores)))] if cores else ["-a"]
    return [perf, "record", "-q", "-N", "-g", "-F", str(frequency), *where, "-o", str(data),
            "--", "sleep", f"{seconds:g}"]


def perf_profile(perf: str, cores: list[int] | None, frequency: int, seconds: float,
                 workdir: Path, timeout: float, max_script_bytes: int) -> Profile:
    """Record with perf for ``seconds`` into ``workdir`` (its data file removed after),
    then fold what ``perf script`` says; each run bounded by ``timeout``."""
    found = resolve_perf(perf) or perf
    data = workdir / "perf.data"
    started = time.monotonic()
    prof = Profile("perf")
    try:
        rec = run_bounded(perf_record_argv(found, cores, frequency, seconds, data),
                          seconds + timeout)
        if rec.status != 0:
            prof.error = rec.error or f"perf record exited {rec.status}: " + \
                _tail(rec.stderr)
            if b"perf_event_open" in rec.stderr or b"Permission" in rec.stderr:
                prof.error += " (under systemd: the unit's SystemCallFilter=~@debug " \
                              "denies perf_event_open; see docs/actions.md)"
            return prof
        script = run_bounded([found, "script", "-i", str(data), "-F", SCRIPT_FIELDS],
                             timeout, keep=max_script_bytes)
        if script.status != 0:
            prof.error = script.error or f"perf script exited {script.status}: " + \
                _tail(script.stderr)
            return prof
        if len(script.stdout) >= max_script_bytes:
            prof.notes.append(f"perf script said more than {max_script_bytes} bytes: "
                              "the rest was dropped")
        prof.folded = fold_perf_script(script.stdout.decode(errors="replace").splitlines())[0] \
            or Counter()
    finally:
        for leftover in (data, workdir / "perf.data.old"):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        prof.seconds = round(time.monotonic() - started, 3)
    return prof


def _tail(raw: bytes) -> str:
    lines = [ln for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
    return " / ".join(lines[-3:])[:400]


# -- the fallback: /proc/<pid>/task/<tid>/stack ----------------------------------------------
@dataclass(frozen=True)
class TaskTime:
    pid: int
    tid: int
    comm: str
    stime: int
    cpu: int


def _task_stat(proc: Path, pid: int, tid: int) -> TaskTime | None:
    try:
        raw = (proc / str(pid) / "task" / str(tid) / "stat").read_bytes()
        st = parse_proc_stat(raw)
        cpu = int(raw[raw.rfind(b")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return None
    return TaskTime(pid, tid, st.comm, st.stime, cpu)


def task_times(proc: Path) -> dict[tuple[int, int], TaskTime]:
    """Every task's system time (in ticks) and the CPU it last ran on."""
    out: dict[tuple[int, int], TaskTime] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            tids = os.listdir(proc / name / "task")
        except OSError:
            continue
        for t in tids:
            if t.isdigit():
                got = _task_stat(proc, int(name), int(t))
                if got is not None:
                    out[(got.pid, got.tid)] = got
    return out


def hot_tasks(before: dict[tuple[int, int], TaskTime], after: dict[tuple[int, int], TaskTime],
              cores: list[int] | None, top: int) -> list[tuple[TaskTime, int]]:
    """The tasks that used the most system time between two scans (ticks), on ``cores``
    when given (where they last ran)."""
    used = []
    for key, now in after.items():
        old = before.get(key)
        if old is None or now.stime <= old.stime:
            continue
        if cores and now.cpu not in cores:
            continue
        used.append((now, now.stime - old.stime))
    used.sort(key=lambda x: (-x[1], x[0].tid))
    return used[:top]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def stack_frames(text: str) -> list[str]:
    """``[<0>] do_syscall_64+0x250/0x290`` lines → function names, innermost first."""
    out = []
    for line in text.splitlines():
        sym = line.split("]", 1)[-1].strip().split("+", 1)[0].strip()
        if sym:
            out.append(sym.replace(";", ":"))
    return out


def proc_profile(proc: Path, cores: list[int] | None, frequency: int, seconds: float,
                 top: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Profile:
    """Sample the kernel stacks of the ``top`` tasks that burn the most system time: a
    first scan of every task's system time, a short wait (a quarter of ``seconds``, at most
    1 s), a second scan; then ``/proc/<pid>/task/<tid>/stack`` (root, CAP_SYS_ADMIN) and
    ``wchan`` of each at ``frequency`` for the rest. A stack is where the task last left
    the CPU (a running task is not stopped to be read), so its innermost frames are often
    the scheduler's; the outer ones say which system call or interrupt it was in."""
    prof = Profile("proc-stack")
    started = clock()
    first = task_times(proc)
    sleep(min(1.0, seconds / 4))
    hot = hot_tasks(first, task_times(proc), cores, top)
    if not hot:
        prof.error = "no task used system time" + (f" on cores {cores}" if cores else "")
        prof.seconds = round(clock() - started, 3)
        return prof
    prof.tasks = [{"pid": t.pid, "tid": t.tid, "comm": t.comm, "cpu": t.cpu,
                   "stime_ticks": n} for t, n in hot]
    end = started + seconds
    period = 1.0 / frequency
    stacks_read = 0
    while True:
        tick = clock()
        for t, _ in hot:
            base = proc / str(t.pid) / "task" / str(t.tid)
            frames = stack_frames(_read(base / "stack"))
            if frames:
                stacks_read += 1
            else:
                wchan = _read(base / "wchan").strip()
                if wchan and wchan != "0":
                    frames = [wchan]
                elif not (base / "stat").exists():
                    continue  # gone
                else:
                    frames = ["[running]"]
            kernel = [f + KERNEL if not f.startswith("[") else f for f in reversed(frames)]
            prof.folded[";".join([t.comm.replace(";", ":"), *kernel])] += 1
        left = end - clock()
        if left <= 0:
            break
        sleep(max(0.0, min(left, period - (clock() - tick))))
    if not stacks_read:
        prof.notes.append("no /proc/<pid>/stack could be read (root with CAP_SYS_ADMIN "
                          "reads it): the stacks are wchan only")
    prof.seconds = round(clock() - started, 3)
    return prof
