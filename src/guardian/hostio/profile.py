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
def folded_text(folded: Counter[str]) -> str:
    """The folded stacks as the collapsed format's text (one ``stack COUNT`` a line)."""
    return "".join(f"{stack} {n}\n" for stack, n in sorted(folded.items()))


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
    build-id cache (nothing written outside the bundle), ``sleep`` bounding it. Not
    ``-q``: that hides perf's own reason when it fails."""
    where = ["-C", ",".join(str(c) for c in sorted(set(cores)))] if cores else ["-a"]
    return [perf, "record", "-N", "-g", "-F", str(frequency), *where, "-o", str(data),
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
                perf_reason(rec.stderr)
            if any(w in rec.stderr for w in _DENIED):
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


# what perf says when perf_event_open(2) is denied (tools/perf/util/evsel.c,
# evsel__open_strerror: EPERM/EACCES)
_DENIED = (b"No permission to enable", b"Access to performance monitoring",
           b"perf_event_open", b"Permission denied")


def perf_reason(raw: bytes) -> str:
    """Perf's own reason, from what it wrote to stderr: its first line (after
    ``Error:``) and its last, its progress lines (``[ perf record: …``) left out."""
    lines = [ln.strip() for ln in raw.decode(errors="replace").splitlines()]
    said = [ln for ln in lines if ln and ln != "Error:" and not ln.startswith("[ perf")]
    if not said:
        return "perf said nothing on stderr"
    out = said[0] if len(said) == 1 else f"{said[0]} … {said[-1]}"
    return out[:400]


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
    state: str = "?"  # R running, S sleeping, D uninterruptible wait, …


def _task_stat(proc: Path, pid: int, tid: int) -> TaskTime | None:
    try:
        raw = (proc / str(pid) / "task" / str(tid) / "stat").read_bytes()
        st = parse_proc_stat(raw)
        rest = raw[raw.rfind(b")") + 2:].split()
        cpu, state = int(rest[36]), rest[0].decode()
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    return TaskTime(pid, tid, st.comm, st.stime, cpu, state)


def task_state(base: Path) -> str | None:
    """A task's state (the third field of ``/proc/<pid>/task/<tid>/stat``: R, S, D, …),
    None when it is gone."""
    try:
        raw = (base / "stat").read_bytes()
        return raw[raw.rfind(b")") + 2:].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


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


SHARE = 0.1  # a task is sampled when its system time is at least this share of the top's
SLEEPING = "[sleeping]"  # S/I: a wait, not kernel CPU time (frames unmarked)
UNINTERRUPTIBLE = "[uninterruptible]"  # D: a kernel wait worth seeing (frames kept _[k])
RUNNING = "[running]"  # on a CPU: the kernel gives no stack of a running task


def proc_profile(proc: Path, cores: list[int] | None, frequency: int, seconds: float,
                 top: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Profile:
    """Sample the kernel stacks of the tasks that burn the most system time: a first scan
    of every task's system time, a short wait (a quarter of ``seconds``, at most 1 s), a
    second scan; the ``top`` tasks with at least :data:`SHARE` of the hottest one's system
    time are then read at ``frequency`` for the rest (``/proc/<pid>/task/<tid>/stack``,
    root with CAP_SYS_ADMIN, else ``wchan``), each read as the task's state says:

    - R (runnable, preempted): its kernel stack, frames marked ``_[k]`` (kernel time); on
      a CPU the kernel gives no stack: ``comm;[running]``;
    - D (uninterruptible): ``comm;[uninterruptible];…_[k]``, a kernel wait worth seeing;
    - S/I (sleeping): ``comm;[sleeping];…`` with the frames unmarked, so a wait never
      counts as kernel time; other states ``comm;[state X]``.

    Each sampled task's reads by kind are kept in ``tasks``."""
    prof = Profile("proc-stack")
    started = clock()
    first = task_times(proc)
    sleep(min(1.0, seconds / 4))
    hot = hot_tasks(first, task_times(proc), cores, top)
    if hot:
        floor = hot[0][1] * SHARE
        hot = [(t, n) for t, n in hot if n >= floor]
    if not hot:
        prof.error = "no task used system time" + (f" on cores {cores}" if cores else "")
        prof.seconds = round(clock() - started, 3)
        return prof
    reads: dict[int, Counter[str]] = {t.tid: Counter() for t, _ in hot}
    end = started + seconds
    period = 1.0 / frequency
    stacks_read = 0
    while True:
        tick = clock()
        for t, _ in hot:
            base = proc / str(t.pid) / "task" / str(t.tid)
            state = task_state(base)
            if state is None:
                continue  # gone
            frames = stack_frames(_read(base / "stack"))
            if frames:
                stacks_read += 1
            else:
                wchan = _read(base / "wchan").strip()
                frames = [wchan] if wchan and wchan != "0" else []
            comm = t.comm.replace(";", ":")
            outer = list(reversed(frames))
            if state in ("S", "I"):
                kind, stack = "sleeping", [comm, SLEEPING, *outer]
            elif state == "D":
                kind = "uninterruptible"
                stack = [comm, UNINTERRUPTIBLE, *(f + KERNEL for f in outer)]
            elif state == "R" and frames:
                kind, stack = "kernel", [comm, *(f + KERNEL for f in outer)]
            elif state == "R":
                kind, stack = "running", [comm, RUNNING]
            else:
                kind, stack = "other", [comm, f"[state {state}]"]
            reads[t.tid][kind] += 1
            prof.folded[";".join(stack)] += 1
        left = end - clock()
        if left <= 0:
            break
        sleep(max(0.0, min(left, period - (clock() - tick))))
    prof.tasks = [{"pid": t.pid, "tid": t.tid, "comm": t.comm, "cpu": t.cpu,
                   "stime_ticks": n, "reads": dict(reads[t.tid])} for t, n in hot]
    if not stacks_read:
        prof.notes.append("no /proc/<pid>/stack could be read (root with CAP_SYS_ADMIN "
                          "reads it): the stacks are wchan only")
    prof.seconds = round(clock() - started, 3)
    return prof


def running_burners(prof: Profile) -> list[dict[str, object]]:
    """The sampled tasks that were on a CPU at half their reads or more (their kernel
    stacks could not be read), hottest first."""
    out = []
    for t in prof.tasks:
        reads = t.get("reads")
        if isinstance(reads, dict) and reads:
            total = sum(int(v) for v in reads.values())
            if 2 * int(reads.get("running", 0)) >= total:
                out.append(t)
    return out
