"""The flight recorder: a continuous, low-rate, system-wide CPU profile (kernel and user
stacks) kept in perf's overwritable ring, written out on demand as folded stacks.

``perf record --overwrite --switch-output=signal -a -g -F <frequency> -m <pages>`` keeps
the kernel's per-CPU ring buffers: when one is full the oldest samples are overwritten,
and nothing is read or written until perf is sent SIGUSR2. Then it writes what the rings
hold (the last seconds to minutes, depending on the ring's size and how busy the CPUs
are) to a new timestamped file, adds the names and mappings of the tasks alive then
(``--overwrite`` implies ``--tail-synthesize``), and goes on recording. :meth:`dump` sends
that signal, waits for the file, folds it with ``perf script`` into the collapsed format
every flame-graph tool reads (``comm;frame;...;frame count``, root first, kernel frames
marked ``_[k]`` as FlameGraph's stackcollapse-perf marks them) and removes the file.

Bounds: perf's rings are ``ring_mb`` in all (split over the CPUs, a power of two of pages
each); at most two switched files exist (``--switch-max-files``), and each is removed once
read; a dump, ``perf script`` included, has a hard timeout, after which perf script's
process group is killed; a stop waits a bounded time, then kills perf. perf runs in its
own session, and (where util-linux's ``setpriv`` is) dies with the thread that started it.

Nothing here raises into the caller: a failure is logged once (per kind), with perf's own
words (:func:`perf_message`: from its "Error" line, whole lines up to 600 characters), and
the method returns None. A task whose name record (COMM) was overwritten before the dump, and that
ended before it, shows as ``:<pid>``, as perf names it.

:func:`current` is the recorder the service started (None when none runs): the evidence
action dumps it when a rule fires.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from guardian.hostio.perfscript import fold_perf_script

log = logging.getLogger("guardian.flight")

FOLDED_NAME = "flight.folded"
DATA_NAME = "flight.data"  # perf's output; switched files are flight.data.<timestamp>
START_TIMEOUT = 10.0  # perf answers its control pipe once its events are open
STOP_TIMEOUT = 10.0  # then SIGKILL
MAX_FILES = 2  # perf's own bound on switched files, should a dump not remove its own
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C", "LC_ALL": "C"}
MESSAGE_CHARS = 600  # perf's words in one log line (its refusal names the capability)
LOG_TAIL = 16384  # the end of perf.log read for them (a long run's progress lines before)

_current: FlightRecorder | None = None
_current_lock = threading.Lock()


def current() -> FlightRecorder | None:
    """The recorder that is running in this process (the service's), or None."""
    with _current_lock:
        rec = _current
    return rec if rec is not None and rec.running else None


def _register(rec: FlightRecorder | None, only_if: FlightRecorder | None = None) -> None:
    global _current
    with _current_lock:
        if only_if is None or _current is only_if:
            _current = rec


@dataclass(frozen=True)
class Dumped:
    """What the last dump held: its file, samples, distinct stacks and the time it spans
    (seconds between its first and last sample)."""

    path: Path
    samples: int
    stacks: int
    seconds: float


def ring_pages(ring_mb: float, cpus: int, page_size: int = 4096) -> int:
    """perf's ``-m``: data pages per CPU, a power of two (at least 4), so that all CPUs'
    rings together take at most ``ring_mb`` MiB (4 pages each when that is less)."""
    per_cpu = int(ring_mb * (1 << 20)) // max(1, cpus) // page_size
    pages = 4
    while pages * 2 <= per_cpu:
        pages *= 2
    return pages


class FlightRecorder:
    """``perf record`` of every CPU into an overwritable ring; :meth:`dump` writes it out.

    ``workdir`` holds perf's files while they are read (a private temporary directory when
    None, removed at :meth:`stop`); ``dump_timeout`` bounds one dump as a whole."""

    def __init__(self, frequency: int = 19, ring_mb: float = 8.0, perf: str = "perf",
                 workdir: Path | None = None, dump_timeout: float = 30.0) -> None:
        self.frequency = frequency
        self.ring_mb = ring_mb
        self.perf = perf
        self.dump_timeout = dump_timeout
        self._workdir = workdir
        self._own_workdir = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: tuple[int, int] | None = None  # our ends: write commands, read acks
        self._lock = threading.Lock()  # one dump at a time; stop waits for it
        self._stopping = threading.Event()  # cuts a dump short: stop waits no longer
        self._logged: set[str] = set()
        self.last: Dumped | None = None

    # -- life cycle ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    @property
    def workdir(self) -> Path | None:
        return self._workdir

    def argv(self, cpus: int | None = None) -> list[str]:
        """The ``perf record`` command line (without the control pipes)."""
        assert self._workdir is not None or cpus is not None
        pages = ring_pages(self.ring_mb, cpus or os.cpu_count() or 1,
                           os.sysconf("SC_PAGE_SIZE"))
        out = (self._workdir or Path(".")) / DATA_NAME
        return [self.perf, "record", "--overwrite", "--switch-output=signal",
                f"--switch-max-files={MAX_FILES}", "-a", "-g", "-F", str(self.frequency),
                "-m", str(pages), "-q", "-o", str(out)]

    def start(self) -> None:
        """Start perf (a no-op while it runs); returns once perf records, or has failed
        (logged)."""
        with self._lock:
            if self.running:
                return
            self._close()
            try:
                self._start()
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                self._once("start", "flight recorder not started: %s", _why(exc))
                self._end(0.0)
                return
        _register(self)
        log.info("flight recorder: %s", " ".join(self.argv()))

    def _start(self) -> None:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="guardian-flight-"))
            self._own_workdir = True
        else:
            self._workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._remove_data()  # a crashed run's
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        self._ctl = (ctl_w, ack_r)
        argv = [*self.argv(), "--control", f"fd:{ctl_r},{ack_w}"]
        setpriv = _setpriv_pdeathsig()
        if setpriv is not None:  # dies with us, even by SIGKILL
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        stderr = open(self._workdir / "perf.log", "wb")  # noqa: SIM115 (closed below)
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                cwd=str(self._workdir), env=_ENV, start_new_session=True,
                pass_fds=(ctl_r, ack_w), close_fds=True)
        finally:
            stderr.close()
            os.close(ctl_r)
            os.close(ack_w)
        # perf reads its control pipe only once its events are open and its handlers set
        os.write(ctl_w, b"ping\n")
        if not self._acked(START_TIMEOUT):
            try:  # its end closes the pipe a moment before it can be waited for
                status: int | None = self._proc.wait(1.0)
            except subprocess.TimeoutExpired:
                status = None
            raise ValueError(" ".join(filter(None, [
                f"perf exited with status {status}" if status is not None
                else f"perf did not answer within {START_TIMEOUT:g}s", self._perf_said()])))

    def _acked(self, timeout: float) -> bool:
        assert self._ctl is not None and self._proc is not None
        ack = self._ctl[1]
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(ack, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(min(0.2, max(0.0, deadline - time.monotonic()))):
                    return os.read(ack, 64).startswith(b"ack")  # b"" when perf ended
                if self._proc.poll() is not None:
                    return False
        return False

    def stop(self) -> None:
        """Stop perf (SIGINT, then SIGKILL after a bound) and remove its files."""
        _register(None, only_if=self)
        self._stopping.set()
        try:
            with self._lock:
                self._end(STOP_TIMEOUT)
        finally:
            self._stopping.clear()

    def _end(self, grace: float) -> None:
        """perf ended (SIGINT, SIGKILL after ``grace`` seconds), its files removed."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._close()
        self._remove_data()
        if self._own_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir, self._own_workdir = None, False

    def _close(self) -> None:
        if self._ctl is not None:
            for fd in self._ctl:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._ctl = None
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None

    # -- dump ---------------------------------------------------------------------------
    def dump(self, dest: Path) -> Path | None:
        """Write what the ring holds to ``dest / "flight.folded"`` and return its path; None
        when perf is not running or the dump failed (logged once) or ran past its
        timeout. Never raises."""
        deadline = time.monotonic() + self.dump_timeout
        if not self._lock.acquire(timeout=self.dump_timeout):
            self._once("busy", "flight recorder: a dump is still running; none taken")
            return None
        try:
            if not self.running:
                if self._proc is not None:
                    self._once("died", "flight recorder: perf has ended: %s",
                               self._perf_said() or f"status {self._proc.returncode}")
                return None
            return self._dump(dest, deadline)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._once("dump", "flight recorder: dump failed: %s", _why(exc))
            return None
        finally:
            self._remove_data()
            self._lock.release()

    def _dump(self, dest: Path, deadline: float) -> Path | None:
        assert self._proc is not None and self._workdir is not None
        before = set(self._switched())
        self._proc.send_signal(signal.SIGUSR2)
        # perf renames the file to its timestamped name once it is written whole
        while not (new := sorted(set(self._switched()) - before)):
            if time.monotonic() >= deadline or self._proc.poll() is not None or \
                    self._stopping.is_set():
                if self._stopping.is_set():  # guardian is stopping: no dump, nothing wrong
                    return None
                self._once("switch", "flight recorder: perf wrote no dump within %gs%s",
                           self.dump_timeout, f": {self._perf_said()}"
                           if self._proc.poll() is not None else "")
                return None
            time.sleep(0.02)
        stacks, span = fold_perf_script(self._script(new[-1], deadline))
        if stacks is None:
            if self._stopping.is_set():
                return None
            self._once("script", "flight recorder: perf script ran past the dump's "
                       "%gs; none written", self.dump_timeout)
            return None
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / FOLDED_NAME
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(f"{stack} {n}\n" for stack, n in sorted(stacks.items()))
        os.replace(tmp, path)
        self.last = Dumped(path, sum(stacks.values()), len(stacks), span)
        return path

    def _script(self, data: Path, deadline: float) -> _Lines:
        """``perf script``'s lines over ``data``, read as they come until the deadline
        (then its process group is killed)."""
        return _Lines([self.perf, "script", "--no-inline", "-F", "comm,tid,time,ip,sym,dso",
                       "-i", str(data)], deadline, self._workdir or Path("/"), self._stopping)

    def _switched(self) -> list[Path]:
        if self._workdir is None:
            return []
        try:
            return [self._workdir / n for n in os.listdir(self._workdir)
                    if n.startswith(DATA_NAME + ".")]
        except OSError:
            return []

    def _remove_data(self) -> None:
        for p in self._switched():
            with contextlib.suppress(OSError):
                p.unlink()

    def _perf_said(self) -> str:
        """What perf said on its stderr, for one log line: :func:`perf_message` of the
        end of perf.log (its last 16 KiB)."""
        if self._workdir is None:
            return ""
        try:
            with open(self._workdir / "perf.log", "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - LOG_TAIL))
                text = f.read(LOG_TAIL).decode(errors="replace")
        except OSError:
            return ""
        lines = text.splitlines()
        return perf_message(lines[1:] if size > LOG_TAIL else lines)

    def _once(self, kind: str, msg: str, *args: object) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning(msg, *args)


def perf_message(lines: list[str], limit: int = MESSAGE_CHARS) -> str:
    """perf's message, from its own words, as one line: from its last line that starts
    "Error" (perf prints "Error:" then what is wrong and which capability or setting would
    allow it), else from its first; blank lines and perf record's progress lines ("[ perf
    record: … ]") left out; whole lines joined while they fit in ``limit`` characters,
    then " …" where more followed (one line longer than the limit is cut at a word)."""
    kept = [ln.strip() for ln in lines
            if ln.strip() and not (ln.startswith("[ perf record:") and ln.endswith("]"))]
    errors = [i for i, ln in enumerate(kept) if ln.startswith("Error")]
    kept = kept[errors[-1]:] if errors else kept
    out: list[str] = []
    used = 0
    for ln in kept:
        size = len(ln) + (1 if out else 0)  # and the space before it
        if used + size > limit:
            if not out:  # the first line alone is too long: its words that fit
                out.append(ln[:limit].rsplit(" ", 1)[0])
            out.append("…")
            break
        out.append(ln)
        used += size
    return " ".join(out)


def _setpriv_pdeathsig() -> str | None:
    """util-linux's setpriv, where it has --pdeathsig (2.33 and later; not Amazon Linux 2's
    or RHEL 8's)."""
    setpriv = shutil.which("setpriv", path=_ENV["PATH"])
    if setpriv is None:
        return None
    try:
        usage = subprocess.run([setpriv, "--help"], capture_output=True, timeout=5,
                               env=_ENV, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return setpriv if b"--pdeathsig" in usage else None


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) \
        or type(exc).__name__


class _Lines:
    """A program's stdout as lines, bounded by a deadline (and ended early when ``stop`` is
    set); ``timed_out`` tells whether it was cut short (its process group killed). Its
    stderr is dropped."""

    def __init__(self, argv: list[str], deadline: float, cwd: Path,
                 stop: threading.Event | None = None) -> None:
        self.argv, self.deadline, self.cwd = argv, deadline, cwd
        self.stop = stop or threading.Event()
        self.timed_out = False

    def __iter__(self) -> Iterator[str]:
        proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=str(self.cwd), env=_ENV,
                                start_new_session=True, close_fds=True)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        rest = b""
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                while True:
                    left = self.deadline - time.monotonic()
                    if left <= 0 or self.stop.is_set():
                        self.timed_out = True
                        return
                    if not sel.select(min(left, 0.2)):
                        continue
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        break
                    *lines, rest = (rest + chunk).split(b"\n")
                    for line in lines:
                        yield line.decode("utf-8", "replace")
            if rest:
                yield rest.decode("utf-8", "replace")
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
