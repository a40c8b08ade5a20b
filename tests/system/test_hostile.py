"""Hostile and broken input (issue: hold under attack and fault). Each test reproduces a
failure an adversarial pass found: numbers that are not durations, inputs that crashed the
loader, files that block the loop, a rules directory swapped under the watcher, an effect
that did not read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.core.audit import TornLine, read_audit
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import default_registry
from guardian.testing import snapshot
from tests.support.checkout import REPO, write
from tests.support.daemon import RULE, daemon

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    """`guardian check`, with its diagnostics (stdout) and summary (stderr) as stderr."""
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", *args],
                          capture_output=True, text=True, timeout=30)
    proc.stderr = proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize(("line", "message"), [
    ('cooldown = nan', "6:12: cooldown: a duration must be a finite number of seconds"),
    ('limit = { runs = 1, within = nan }', "6:30: limit.within: a duration must be a finite"),
    ('limit = { runs = 1, within = "0s" }', "6:30: limit.within: Input should be greater "
                                            "than 0"),
    ('for = inf', "6:7: for: a duration must be a finite number of seconds"),
    ('for = "100000000w"', "6:7: for: duration '100000000w' is longer than ten years"),
])
def test_durations_are_finite_and_windows_positive(tmp_path: Path, line: str,
                                                    message: str) -> None:
    """Before: NaN cooldowns and limits passed `check` and acted every tick."""
    rules = write(tmp_path, "r.toml", f'''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
{line}
''')
    proc = _check(str(rules))
    assert proc.returncode == 1 and f"r.toml:{message}" in proc.stderr, proc.stderr


def test_config_windows_are_positive(tmp_path: Path) -> None:
    """Before: `interval = nan` spun the loop at 98% CPU."""
    config = write(tmp_path, "g.toml", '[engine]\ninterval = nan\n'
                                       'budget = { runs = 2, within = "0s" }\n')
    rules = write(tmp_path, "r.toml", RULE.format(name="r"))
    proc = _check("--config", str(config), str(rules))
    assert proc.returncode == 1
    assert "g.toml:2:12: interval: a duration must be a finite" in proc.stderr
    assert "g.toml:3:31: budget.within: Input should be greater than 0" in proc.stderr


def test_inputs_that_crashed_the_loader_are_located_errors(tmp_path: Path) -> None:
    """Before: a 400-digit integer in `when` and arrays nested 3,000 deep printed a
    traceback (and a hot reload of either took the daemon down)."""
    big = write(tmp_path, "big.toml", RULE.format(name="r").replace(
        "processes.total > 0", "processes.total > " + "9" * 400))
    deep = write(tmp_path, "deep.toml", "version = 1\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    proc = _check(str(big), str(deep))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "big.toml:5:27: in `when`: number too large" in proc.stderr
    assert "deep.toml:1:1: TOML nested too deeply to read" in proc.stderr


def test_rule_files_never_block_and_have_a_size_cap(tmp_path: Path) -> None:
    """Before: a FIFO named *.toml blocked the loop on reload, and a 50 MB file cost 7 s
    and 242 MB."""
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "ok.toml", RULE.format(name="r"))
    os.mkfifo(rules / "fifo.toml")
    (rules / "huge.toml").write_bytes(b"#" * (50 << 20))
    t0 = time.monotonic()
    proc = _check(str(rules))
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 1
    assert "fifo.toml:1:1: cannot read rule file: not a regular file" in proc.stderr
    assert "huge.toml:1:1: cannot read rule file: 52428800 bytes; at most 1048576" \
        in proc.stderr


def test_a_reload_that_cannot_load_keeps_the_daemon_and_its_heartbeat(tmp_path: Path) -> None:
    with daemon(tmp_path) as (proc, notify):
        notify.wait_for("READY")
        write(tmp_path / "rules", "deep.toml", "version = 1\nx = " + "[" * 3000 + "]" * 3000)
        notify.wait_for("READY", contains="reload rejected")
        os.mkfifo(tmp_path / "rules" / "fifo.toml")
        notify.wait_for("RELOADING")
        notify.wait_for("READY", contains="reload rejected, 2 error(s)")
        for _ in range(2):
            notify.wait_for("WATCHDOG", timeout=3)  # the loop never blocked on the FIFO
        assert proc.poll() is None


def test_a_replaced_rules_directory_is_still_watched(tmp_path: Path) -> None:
    """Before: a rules directory replaced by a symlink (or recreated) left the watcher on
    the old inode, and later edits were never noticed."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for d in (v1, v2):
        d.mkdir()
        write(d, "one.toml", RULE.format(name="always"))
    link = tmp_path / "rules"
    link.symlink_to(v1)
    with daemon(tmp_path, rules=link) as (proc, notify):
        notify.wait_for("READY", contains="1 rules")
        tmp_link = tmp_path / "rules.new"
        tmp_link.symlink_to(v2)
        tmp_link.replace(link)  # atomic swap, as a ConfigMap update or a deploy does
        notify.wait_for("READY", contains="1 rules")
        write(v2, "two.toml", RULE.format(name="second"))
        notify.wait_for("READY", contains="2 rules", timeout=15)
        assert proc.poll() is None


class Unread(Action[NoParams]):
    """Applies, but reading the effect back disagrees."""

    name: ClassVar[str] = "test.unread"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True, verified=False, detail="read-back disagrees")


def test_an_unverified_outcome_is_its_own_outcome() -> None:
    """Before: a cordon whose read-back disagreed counted as ok in the metrics."""
    reg = default_registry().copy()
    reg.add_action(Unread)
    rules = load_text(RULE.format(name="r").replace('use = "log"', 'use = "test.unread"'),
                      registry=reg)
    snap = snapshot(0.0, {"processes.total": 10.0})
    [done] = Executor(Host(), dry_run=False).run(Engine(rules).evaluate(snap), snap)
    assert done.result == "unverified"


# -- reaping hits only the process that was planned -------------------------------------

PID_REUSE = r"""
import ctypes, json, os, signal, subprocess, sys, threading, time
sys.path.insert(0, sys.argv[1])
from guardian.actions.reap import ReapParams, ReapZombies
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext
from guardian.core.snapshot import Snapshot
from tests.support.kernel import ZOMBIE_PARENT, is_zombie_of

ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
parent = subprocess.Popen([sys.executable, "-c", ZOMBIE_PARENT, "3"], stdout=subprocess.PIPE,
                          text=True)
assert parent.stdout.readline().strip() == "ready"
pid = parent.pid
while sum(is_zombie_of(int(p), pid) for p in os.listdir("/proc") if p.isdigit()) < 3:
    time.sleep(0.01)
act = ReapZombies(ReapParams.model_validate({"parents": [pid], "ladder": [
    {"signal": "SIGCHLD", "wait": "2s"}, {"signal": "SIGKILL", "wait": "1s"}]}))
ctx = ActionContext("t", Snapshot(0.0), Host(), dry_run=False)
plan = act.plan(ctx)
out = {}
worker = threading.Thread(target=lambda: out.update(outcome=act.apply(plan, ctx)))
worker.start()
time.sleep(0.5)  # SIGCHLD sent; the ladder waits 2 s before SIGKILL
os.kill(pid, signal.SIGKILL)  # the parent exits; its zombies come to us, unreaped
parent.wait()
victim = None
for _ in range(200):  # an unrelated process takes the parent's PID
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    victim = subprocess.Popen(["sleep", "30"])
    if victim.pid == pid:
        break
    victim.kill(); victim.wait()
worker.join(10)
alive = victim.poll() is None
victim.kill(); victim.wait()
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
print(json.dumps({"reused": victim.pid == pid, "victim_alive": alive,
                  "signals": out["outcome"].data["parents"][0]["signals"]}))
"""


def test_a_parent_pid_taken_by_another_process_mid_ladder_is_never_signalled() -> None:
    """Before: the parent's identity was checked once, before the first step; when it
    exited during the SIGCHLD wait and an unrelated process took its PID, SIGKILL reached
    that process. The PID is reused for real here (ns_last_pid), in a subreaper that
    keeps the orphaned zombies unreaped, as on a host whose init does not reap."""
    from tests.support.kernel import need_root
    need_root()
    proc = subprocess.run([sys.executable, "-c", PID_REUSE, str(REPO)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["reused"], "could not make the PID be reused; the test proves nothing"
    assert result["victim_alive"] and result["signals"] == ["SIGCHLD"]


PTHREAD_EXIT = r"""
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(30,)).start()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)  # the main thread ends; the process lives on
"""

PARENT_OF = r"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                         text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(30)
"""


def test_a_live_process_whose_main_thread_exited_is_not_a_zombie() -> None:
    """Before: a leader that called pthread_exit shows Z in /proc/<pid>/stat while its
    other threads run; it was counted as a zombie and its parent was sent SIGCHLD, SIGTERM
    and SIGKILL."""
    from guardian.actions.reap import ReapParams, ReapZombies
    from guardian.core.snapshot import Snapshot
    from guardian.hostio.procfs import read_proc_stat
    from guardian.plugin.contract import ActionContext
    from guardian.sources.processes import ProcessesSource
    from tests.support.kernel import need_root
    need_root()
    parent = subprocess.Popen([sys.executable, "-c", PARENT_OF, PTHREAD_EXIT],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child_pid, ready = parent.stdout.readline().split()
        assert ready == "ready"
        deadline = time.monotonic() + 5
        while (st := read_proc_stat("/proc", int(child_pid))) is not None and \
                st.state != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert st is not None and st.state == "Z" and st.threads == 2
        assert not st.is_zombie
        plan = ReapZombies(ReapParams(parents=[parent.pid])).plan(
            ActionContext("t", Snapshot(0.0), Host(), dry_run=True))
        assert plan.steps == [] and plan.data["targets"] == []
        fam = ProcessesSource(Host()).collect(0.0)["processes.zombies_by_parent"]
        assert isinstance(fam, dict)
        assert not any(dict(k)["ppid"] == str(parent.pid) for k in fam)
    finally:
        parent.kill()
        parent.wait()


OTHER_UID_ZOMBIES = r"""
import os, time
for _ in range(3):
    if os.fork() == 0:
        os.setuid(65534)  # the child becomes "nobody", then exits unreaped
        os._exit(0)
print("ready", flush=True)
time.sleep(30)
"""


def test_a_parent_whose_zombies_belong_to_another_user_is_left_alone() -> None:
    from guardian.actions.reap import ReapParams, ReapZombies
    from guardian.core.snapshot import Snapshot
    from guardian.plugin.contract import ActionContext
    from tests.support.kernel import is_zombie_of, need_root
    need_root()
    parent = subprocess.Popen([sys.executable, "-c", OTHER_UID_ZOMBIES],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 5
        while sum(is_zombie_of(int(p), parent.pid) for p in os.listdir("/proc")
                  if p.isdigit()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        ctx = ActionContext("t", Snapshot(0.0), Host(), dry_run=True)
        plan = ReapZombies(ReapParams(parents=[parent.pid])).plan(ctx)
        assert plan.steps == []
        assert any("runs as uid 0 while its zombies belong to uid 65534 (allow_other_uid)"
                   in s for s in plan.skipped), plan.skipped
        allowed = ReapZombies(ReapParams(parents=[parent.pid], allow_other_uid=True))
        assert len(allowed.plan(ctx).steps) == 1
    finally:
        parent.kill()
        parent.wait()


def test_parent_pid_2_is_not_a_kernel_thread_outside_the_host_namespace(
        tmp_path: Path) -> None:
    """In a container's PID namespace PID 2 is an ordinary process: only PF_KTHREAD says
    kernel thread."""
    from guardian.hostio.procfs import read_proc_stat
    from guardian.testing import FakeHost

    fake = FakeHost(tmp_path)
    fake.process(2, "sh", ppid=1)  # a container's second process
    fake.process(40, "worker", state="Z", ppid=2)
    fake.process(41, "kworker/0:1", ppid=2, flags=0x04208060)
    zombie, kthread = read_proc_stat(fake.host.proc, 40), read_proc_stat(fake.host.proc, 41)
    assert zombie is not None and zombie.is_zombie and not zombie.is_kernel_thread
    assert kthread is not None and kthread.is_kernel_thread


# -- persistence fails closed, and keeps running --------------------------------------

@contextmanager
def tiny_tmpfs(where: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs: filling it makes writes fail with ENOSPC, as a full disk does."""
    from tests.support.kernel import need_root
    need_root()
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(fs: Path) -> Path:
    ballast = fs / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)
    return ballast


MARKER = '''version = 1
[[rule]]
name = "acts"
summary = "s"
when = "processes.total > 0"
cooldown = "1h"
limit = {{ runs = 1, within = "1d" }}
  [[rule.action]]
  use = "command"
  argv = ["/bin/sh", "-c", "echo acted >> {marker}"]
'''


def _service(tmp_path: Path, state_dir: Path, audit_dir: Path) -> Any:
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions
    from guardian.service.notify import Notifier

    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    write(rules, "r.toml", MARKER.format(marker=tmp_path / "marker"))
    opts = ServiceOptions(rules=[str(rules)], state_path=state_dir / "state.json",
                          audit_path=audit_dir / "audit.jsonl", metrics_port=None,
                          require_root_owned_rules=False)
    d = Daemon(opts, Config(), notifier=Notifier({}))
    assert d.start() == 0
    return d


def _marks(tmp_path: Path) -> int:
    marker = tmp_path / "marker"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.mark.parametrize("which", ["state", "audit"])
def test_nothing_is_applied_unless_state_and_audit_are_durable(tmp_path: Path,
                                                               which: str) -> None:
    """Before: with the state unwritable guardian acted anyway (three kill-and-restart
    cycles, three runs of a once-a-day action in 8 s); with the audit log unwritable it
    crashed after leaving a torn line. Now: no apply, the loop ticks on, the fault is in
    the status and metrics, and it acts (once) when the disk is back."""
    with tiny_tmpfs(tmp_path / "disk") as disk:
        state_dir, audit_dir = (disk, tmp_path) if which == "state" else (tmp_path, disk)
        if which == "audit":  # a torn line that fills its page: the next byte needs a new one
            half = '{"type":"decision","rule":"ear'
            (disk / "audit.jsonl").write_text(half + "x" * (4096 - len(half)))
        d = _service(tmp_path, state_dir, audit_dir)
        try:
            ballast = _fill(disk)
            for _ in range(3):
                d.tick()
            assert _marks(tmp_path) == 0
            assert "NOT ACTING, persistence failing" in d.status()
            assert d.metrics.persistence_ok._value.get() == 0
            ballast.unlink()
            d.tick()
            assert _marks(tmp_path) == 1
            assert "NOT ACTING" not in d.status()
            assert d.metrics.persistence_ok._value.get() == 1
            d.tick()
        finally:
            d.shutdown()
        d = _service(tmp_path, state_dir, audit_dir)  # a restart keeps the cooldown
        try:
            d.tick()
        finally:
            d.shutdown()
        assert _marks(tmp_path) == 1
        records = list(read_audit(audit_dir / "audit.jsonl"))
        torn = [r for r in records if isinstance(r, TornLine)]
        assert len(torn) == (1 if which == "audit" else 0)  # only the planted one
        assert torn == [] or torn[0].line_no == 1
        assert sum(1 for r in records if isinstance(r, dict) and r["type"] == "outcome") == 1


def test_invalid_state_entries_are_dropped_not_fatal(tmp_path: Path) -> None:
    """Before: valid JSON of the wrong shape crashed start-up into a restart loop, and a
    NaN last_run bypassed cooldown and limit."""
    from guardian.runtime import state as state_file

    text = RULE.format(name="good") + RULE.format(name="bad").replace("version = 1\n", "")
    for n in ("nan", "str", "null", "nosince"):
        text += RULE.format(name=n).replace("version = 1\n", "")
    engine = Engine(load_text(text))
    path = tmp_path / "state.json"
    path.write_text('{"format": 2, "boot_id": "x", "saved_mono": 1.0, "saved_at": 1.0, '
                    '"global_runs": [], "rules": {'
                    '"good": {"phase": "firing", "since": 0.5, "last_run": 0.5, "runs": [0.5]},'
                    '"nan": {"phase": "inactive", "last_run": NaN},'
                    '"str": {"phase": "inactive", "last_run": "yesterday"},'
                    '"null": {"phase": "inactive", "runs": [null]},'
                    '"nosince": {"phase": "pending"},'
                    '"bad": "not a table"}}')
    assert state_file.load(engine, path) == ["good"]
    assert engine.states["good"].phase == "firing"
    for junk in ("[1, 2]", '{"format": 2, "rules": []}', '{"format": 9}', "NaN"):
        path.write_text(junk)
        assert state_file.load(Engine(load_text(RULE.format(name="x"))), path) == []


def test_a_wrong_wall_clock_never_suppresses_actions_for_good(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: persisted times were wall-clock; a clock one year behind at start-up put
    every last run a year into the future, and no cooldown ever ended."""
    from guardian.runtime import state as state_file

    rules = load_text(RULE.format(name="r"))  # cooldown 1h
    engine = Engine(rules)
    now = time.monotonic()
    engine.states["r"].phase, engine.states["r"].since = "firing", now
    engine.states["r"].last_run = now
    path = tmp_path / "state.json"
    state_file.save(engine, path)
    year = 365 * 86400.0
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - year)  # the clock state reads
    # the same boot: monotonic times are exact, whatever the wall clock says
    same = Engine(rules)
    state_file.load(same, path)
    assert abs((same.states["r"].last_run or 0) - now) < 1.0
    # another boot (the wall clock a year behind): nothing lands after now
    monkeypatch.setattr(state_file, "boot_id", lambda: "another-boot")
    other = Engine(rules)
    state_file.load(other, path)
    last = other.states["r"].last_run
    assert last is not None and last <= time.monotonic()
    assert [d.kind for d in other.evaluate(snapshot(time.monotonic() + 3601,
                                                    {"processes.total": 5.0}))] == ["retry"]


def test_audit_and_recording_never_follow_a_planted_symlink(tmp_path: Path) -> None:
    """Before: `--audit` and `record -o` followed a symlink in a world-writable directory
    and overwrote its target as root."""
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    for name in ("audit.jsonl", "rec.gz"):
        (tmp_path / name).symlink_to(target)
    rules = write(tmp_path, "r.toml", RULE.format(name="r"))
    run = subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--dry-run",
                          "--warmup", "0s", "--rules", str(rules), "--audit",
                          str(tmp_path / "audit.jsonl")], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "it is a symlink" in run.stderr, run.stderr
    rec = subprocess.run([sys.executable, "-m", "guardian", "record", "-o",
                          str(tmp_path / "rec.gz"), "--duration", "1s"], capture_output=True,
                         text=True, timeout=60)
    assert rec.returncode == 2 and "exists" in rec.stderr, rec.stderr
    assert target.read_text() == "keep me\n"
    assert "Traceback" not in run.stderr + rec.stderr


class Slow(Action[NoParams]):
    """Outlives its timeout."""

    name: ClassVar[str] = "test.slow"
    started: ClassVar[int] = 0

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Slow.started += 1
        time.sleep(1.5)
        return Outcome(ok=True, detail="done at last")


def test_no_retry_while_an_overrunning_apply_lives_and_its_late_outcome_is_audited(
        tmp_path: Path) -> None:
    """Before: an apply that outlived apply_timeout was reported failed while its thread
    went on, and the retry started a second worker beside it."""
    from guardian.core.audit import AuditLog

    reg = default_registry().copy()
    reg.add_action(Slow)
    rules = load_text(RULE.format(name="r").replace('use = "log"', 'use = "test.slow"')
                      .replace('cooldown = "1h"', 'cooldown = "0s"'), registry=reg)
    engine = Engine(rules)
    audit = tmp_path / "a.jsonl"
    ex = Executor(Host(), dry_run=False, audit=AuditLog(audit), apply_timeout=0.3)
    first = snapshot(0.0, {"processes.total": 5.0})
    [timed_out] = ex.run(engine.evaluate(first), first)
    assert timed_out.result == "failed" and "did not finish within 0.3s" in \
        (timed_out.outcome.error if timed_out.outcome else "")
    again = snapshot(1.0, {"processes.total": 5.0})
    [retry] = ex.run(engine.evaluate(again), again)
    assert retry.refused and "still going" in retry.error
    assert Slow.started == 1
    time.sleep(1.6)
    late = [r for r in read_audit(audit) if isinstance(r, dict) and r["type"] == "late_outcome"]
    assert len(late) == 1 and late[0]["outcome"]["detail"] == "done at last"


@pytest.mark.parametrize(("pattern", "why"), [
    ("(a+)+$", "nested quantifiers"),
    ("(x|xy)*z", "a repeated alternation whose branches can match the same text"),
    # polynomial, not exponential: before, accepted, and 10 s per attacker-chosen line
    (r"^.*.*.*.*: NVRM: Xid \\d+", "costs more than 2s on one crafted 65536-character line"),
])
def test_a_catastrophic_pattern_is_refused_when_the_config_loads(
        tmp_path: Path, pattern: str, why: str) -> None:
    """Before: `(a+)+$` and one 32-character line froze the whole daemon (the regex engine
    holds the interpreter lock): no watchdog ping for 20 s. A polynomial pattern is
    measured on crafted lines, in a child process, when the configuration loads."""
    config = write(tmp_path, "g.toml", f'[sources.kmsg]\npatterns = {{ bad = "{pattern}" }}\n')
    proc = _check("--config", str(config), str(write(tmp_path, "r.toml", RULE.format(
        name="r"))))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"g.toml:2:12: source 'kmsg': patterns: pattern 'bad': {why}" in proc.stderr


@pytest.mark.parametrize(("patterns", "why"), [
    ('{ a = "(?P<g>x)", b = "(?P<g>y)" }',
     "the patterns do not combine into one expression: redefinition of group name 'g'"),
    # compiles alone; past the start of the combined expression a global flag is an error
    ('{ a = "(?i)nvrm: xid" }',
     "the patterns do not combine into one expression: global flags not at the start"),
    # compiles alone and combined, but \\1 would name another pattern's group there
    ('{ a = "^(x)\\\\1" }', "pattern 'a': numbered group references change meaning"),
])
def test_patterns_that_do_not_combine_are_located_errors(
        tmp_path: Path, patterns: str, why: str) -> None:
    """Each is a path:line:col error at the patterns, from `check` and from `run`, and
    never a traceback (before: 1:1, and the position inside the combined expression)."""
    config = write(tmp_path, "g.toml", f'[sources.kmsg]\npatterns = {patterns}\n')
    rules = write(tmp_path, "r.toml", RULE.format(name="r"))
    proc = _check("--config", str(config), str(rules))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"g.toml:2:12: source 'kmsg': patterns: {why}" in proc.stderr
    assert "position" not in proc.stderr
    run = subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--dry-run",
                          "--config", str(config), "--rules", str(rules)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert f"g.toml:2:12: source 'kmsg': patterns: {why}" in run.stderr


# -- the metrics endpoint and thread limits --------------------------------------------

def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_idle_metrics_connections_do_not_grow_the_daemon(tmp_path: Path) -> None:
    """Before: a thread per connection, with no timeout: idle connections grew the thread
    count without bound. Loopback only."""
    import socket
    import urllib.request

    port = _free_port()
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        before = _threads(proc.pid)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
        try:
            time.sleep(1.0)
            assert _threads(proc.pid) <= before  # the workers were started already
            notify.wait_for("WATCHDOG", timeout=3)
        finally:
            for s in idle:
                s.close()
        deadline = time.monotonic() + 15  # idle ones are dropped after their timeout
        while True:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=2).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.5)
        assert "guardian_rule_state" in body and proc.poll() is None


EVERY_TICK = '''version = 1
[[rule]]
name = "always"
summary = "s"
when = "processes.total > 0"
cooldown = "0s"
limit = { runs = 1000, within = "1h" }
  [[rule.action]]
  use = "log"
'''


def test_a_task_limit_costs_an_action_never_the_daemon(tmp_path: Path) -> None:
    """Before: under a task limit (systemd's TasksMax) the next apply could not start its
    worker thread and the daemon exited. A real pids cgroup holds it at its thread count."""
    from tests.support.kernel import need_root
    need_root()
    pids = Path("/sys/fs/cgroup/pids")
    if not (pids / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy")
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "r.toml", EVERY_TICK)
    group = pids / f"guardian-test-{os.getpid()}"
    group.mkdir()
    try:
        with daemon(tmp_path, rules=rules) as (proc, notify):
            notify.wait_for("STATUS", contains="last action: log for always: ok")
            (group / "cgroup.procs").write_text(str(proc.pid))
            (group / "pids.max").write_text(str(_threads(proc.pid)))
            notify.wait_for("STATUS", contains="NOT ACTING (cannot start a thread",
                            timeout=10)
            for _ in range(3):
                notify.wait_for("WATCHDOG", timeout=3)
            assert proc.poll() is None
            (group / "pids.max").write_text("max")
            notify.wait_for("STATUS", contains="last action: log for always: ok", timeout=10)
            (pids / "cgroup.procs").write_text(str(proc.pid))
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# -- the loop never blocks without a bound --------------------------------------------

@contextmanager
def dripping_api() -> Iterator[str]:
    """An "API server" on loopback that accepts and answers one byte every 2 s, forever:
    every read succeeds, so no per-read timeout ever fires."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if stop.wait(2.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()


def test_an_api_that_drips_never_stalls_ready_the_watchdog_or_sigterm(tmp_path: Path) -> None:
    """Before: plan() and the fleet budget ran on the loop; an API server that drips a byte
    every 3 s gave no READY=1 and no watchdog ping for 105 s, and SIGTERM was ignored."""
    from tests.support.kube_standin import kubeconfig

    with dripping_api() as url:
        kc = kubeconfig(tmp_path, url)
        rules = tmp_path / "rules"
        rules.mkdir()
        write(rules, "k.toml", f'''version = 1
[[rule]]
name = "k"
summary = "s"
when = "processes.total > 0"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
  timeout = 5
''')
        with daemon(tmp_path, rules=rules) as (proc, notify):
            t0 = time.monotonic()
            notify.wait_for("READY", timeout=5)
            assert time.monotonic() - t0 < 5
            last = time.monotonic()
            gaps = []
            while time.monotonic() - t0 < 8:  # WATCHDOG_USEC is 1 s: a ping every 0.5 s
                notify.wait_for("WATCHDOG", timeout=3)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()
            assert max(gaps) < 1.5, gaps
            t1 = time.monotonic()
            proc.terminate()
            assert proc.wait(timeout=5) == 0
            assert time.monotonic() - t1 < 3


# -- who burns kernel time --------------------------------------------------------------

def test_the_command_burning_a_core_in_the_kernel_is_named() -> None:
    """A real dd pinned to one core, clearing pages from /dev/zero: nearly all of it is
    system time (utime and stime are fields 14 and 15 of /proc/<pid>/stat). Before, the
    signal named the command alone, which a process chooses: a user's dd called
    `kubelet` read as kubelet burning the core. Now its real UID and cgroup say whose."""
    import shutil
    import tempfile

    from guardian.core.snapshot import labels_of
    from guardian.hostio.procfs import cgroup_of
    from guardian.sources.processes import ProcessesConfig, ProcessesSource

    home = Path(tempfile.mkdtemp(prefix="guardian-burn-"))
    home.chmod(0o755)
    impostor = home / "kubelet"  # a user's copy of dd, named as the node agent
    shutil.copy(shutil.which("dd") or "/bin/dd", impostor)
    src = ProcessesSource(Host(), ProcessesConfig(top=3))
    burner = subprocess.Popen(["taskset", "-c", "0", str(impostor), "if=/dev/zero",
                               "of=/dev/null", "bs=4M"], stderr=subprocess.DEVNULL,
                              user=65534, group=65534)
    try:
        time.sleep(0.5)
        assert src.collect(time.monotonic())["processes.top_system_cpu_pct"] is None
        time.sleep(1.5)
        top = src.collect(time.monotonic())["processes.top_system_cpu_pct"]
        where = cgroup_of(Path("/proc"), burner.pid)
    finally:
        burner.kill()
        burner.wait()
        shutil.rmtree(home)
    assert isinstance(top, dict) and 0 < len(top) <= 3
    who = labels_of({"comm": "kubelet", "uid": "65534", "cgroup": where})
    assert top[who] >= 50, top
    assert max(top, key=lambda k: top[k]) == who


def test_slow_clients_never_keep_a_probe_from_healthz(tmp_path: Path) -> None:
    """Before: eight connections sending one header byte every 2 s held every worker and
    the queue: 16 of 16 health probes failed while the loop was healthy (in the DaemonSet
    any pod reaches the node's address, and a failing liveness probe restarts guardian).
    Now a request's head must arrive within 2 s and only whole requests reach a worker:
    64 dripping clients (more than the pending slots), and every probe is answered."""
    import socket
    import urllib.request

    port = _free_port()
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        drips: list[socket.socket] = []
        answered = failed = 0
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 8:
                while len(drips) < 64:  # reconnect as they are dropped
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(b"GET /healthz HTTP/1.1\r\n")
                    drips.append(s)
                for s in list(drips):
                    try:
                        s.sendall(b"X")  # one byte at a time, never the blank line
                    except OSError:
                        drips.remove(s)
                        s.close()
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                    answered += 1
                except OSError:
                    failed += 1
                time.sleep(0.2)
        finally:
            for s in drips:
                s.close()
        assert failed == 0 and answered >= 10, (answered, failed)
        assert proc.poll() is None
