"""Reaping hits only the process that was planned: a parent's PID reused mid-ladder, a
live process whose main thread exited, zombies of another user. Real processes, as root
(what needs no process, PID 2 in a container's namespace, is in
tests/unit/hostio/test_procfs_hostile.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from guardian import Host
from tests.support.checkout import REPO
from tests.support.wait import wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


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
        st = wait_until(lambda: s if (s := read_proc_stat("/proc", int(child_pid))) is not None
                        and s.state == "Z" else None, "the child's main thread exited (Z)")
        assert st.threads == 2
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
        wait_until(lambda: sum(is_zombie_of(int(p), parent.pid) for p in os.listdir("/proc")
                               if p.isdigit()) >= 3, "three zombies of another user",
                   every=0.01)
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


