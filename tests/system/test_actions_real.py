"""Actions applied for real on this VM and verified: zombies reaped through real parents,
real dying memcgs released, a real IRQ moved and restored, programs run with timeouts,
units stopped under a real systemd (nspawn)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pytest

from guardian.actions.command import CommandAction, CommandParams
from guardian.actions.irq import IrqMove, IrqParams
from guardian.actions.memcg import MemcgParams, MemcgRelease
from guardian.actions.reap import LadderStep, ReapParams, ReapZombies
from guardian.actions.systemd import SystemdUnit, UnitParams
from guardian.core.snapshot import Snapshot, Value
from guardian.hostio.host import Host
from guardian.hostio.irq import interface_irqs, parse_cpu_list
from guardian.plugin.contract import ActionContext
from guardian.runtime.executor import Executor
from guardian.sources.systemd import SystemdSource
from guardian.testing import FakeHost, family
from guardian.testing.nspawn import booted
from tests.support.checkout import FIXTURES
from tests.support.kernel import (
    _zombie_children,
    dying_memcgs,
    is_zombie_of,
    need_memcg_v1,
    need_root,
    orphaning_zombies,
    zombies,
)
from tests.support.wait import ends, wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def ctx(values: Mapping[str, Value] | None = None, host: Host | None = None) -> ActionContext:
    return ActionContext("test-rule", Snapshot(0.0, dict(values or {})), host or Host(),
                         dry_run=False, values={"x": 1})


# -- command -------------------------------------------------------------------------------

def test_command_passes_shell_metacharacters_literally(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    text = f"$(touch {canary}); `id` | cat > /dev/null && echo $HOME *"
    act = CommandAction(CommandParams(argv=["printf", "%s|%s", text, "$GUARDIAN_RULE"]))
    c = ctx()
    out = act.apply(act.plan(c), c)
    assert out.ok and out.data["stdout"] == f"{text}|$GUARDIAN_RULE"
    assert not canary.exists()


def test_command_gets_a_minimal_environment_and_the_rule() -> None:
    act = CommandAction(CommandParams(argv=["env"], env={"EXTRA": "1"}))
    c = ctx()
    out = act.apply(act.plan(c), c)
    env = dict(line.split("=", 1) for line in str(out.data["stdout"]).splitlines())
    assert env["GUARDIAN_RULE"] == "test-rule" and json.loads(env["GUARDIAN_VALUES"]) == {
        "x": 1}
    assert env["EXTRA"] == "1" and "HOME" not in env and "PYTHONPATH" not in env


def test_command_timeout_kills_the_child_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.fork() or 0)); " \
             "time.sleep(60)"
    act = CommandAction(CommandParams(argv=[sys.executable, "-c", script], timeout=0.5))
    c = ctx()
    # the child sleeps a minute: apply ends (within the 30 s bound) only by the timeout
    out = ends(lambda: act.apply(act.plan(c), c), "a command past its timeout")
    assert not out.ok and "timed out after 0.5s" in out.error
    grandchild = int(pidfile.read_text() or 0)
    if grandchild:
        wait_until(lambda: not Path(f"/proc/{grandchild}").exists(),
                   "the grandchild killed with the child")


def test_command_that_cannot_start_is_reported() -> None:
    act = CommandAction(CommandParams(argv=["/nonexistent/tool"]))
    c = ctx()
    out = act.apply(act.plan(c), c)
    assert not out.ok and "cannot run /nonexistent/tool" in out.error


# -- reap ----------------------------------------------------------------------------------

REAPS_ON_SIGCHLD = r"""
import os, signal, sys, time
n = int(sys.argv[1])
for _ in range(n):
    if os.fork() == 0:
        os._exit(0)
time.sleep(0.3)  # the children are zombies now; their SIGCHLDs were discarded (SIG_DFL)
def reap(*_):
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] <= 0: break
        except ChildProcessError:
            break
signal.signal(signal.SIGCHLD, reap)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def _reap_params(**kw: object) -> ReapParams:
    return ReapParams.model_validate({"ladder": [{"signal": "SIGCHLD", "wait": "1s"},
                                                 {"signal": "SIGTERM", "wait": "2s"}], **kw})


def test_a_parent_that_reaps_on_sigchld_is_done_at_step_one() -> None:
    need_root()
    parent = subprocess.Popen([sys.executable, "-c", REAPS_ON_SIGCHLD, "5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        assert _zombie_children(parent.pid) == 5
        act = ReapZombies(_reap_params(parents=[parent.pid]))
        c = ctx()
        plan = act.plan(c)
        assert [s.target for s in plan.steps] == [f"pid {parent.pid} (python3)"] or \
            plan.steps[0].target.startswith(f"pid {parent.pid} (")
        out = act.apply(plan, c)
        assert out.ok and out.verified, out
        [res] = out.data["parents"]
        assert res["signals"] == ["SIGCHLD"] and res["reaped"] == 5
        assert parent.poll() is None  # the parent lives on
    finally:
        parent.kill()
        parent.wait(timeout=10)


def test_a_parent_that_never_waits_is_escalated_and_zombies_reaped() -> None:
    """PID 1 here does not reap orphans, so this test process is a child subreaper and
    reaps what reparents to it, as init would, in a thread while the action runs."""
    with orphaning_zombies(4) as (parent, zpids):
        stop = threading.Event()

        def init_like_reaper() -> None:
            left = set(zpids)
            while left and not stop.is_set():
                for z in list(left):
                    try:
                        if os.waitpid(z, os.WNOHANG)[0] == z:
                            left.discard(z)
                    except ChildProcessError:
                        pass  # not reparented to us yet
                time.sleep(0.01)

        reaper = threading.Thread(target=init_like_reaper)
        reaper.start()
        try:
            act = ReapZombies(_reap_params(parents=[parent.pid]))
            c = ctx()
            out = act.apply(act.plan(c), c)
        finally:
            stop.set()
            reaper.join()
        assert out.ok and out.verified, out
        [res] = out.data["parents"]
        assert res["signals"] == ["SIGCHLD", "SIGTERM"] and res["reaped"] == 4


def test_zombies_reaped_a_while_after_they_reparent_count_as_reaped() -> None:
    """Before: judged the moment the parent died, before their new parent (PID 1, a
    subreaper) had run: reported as moved to it and not reaped. Here the reaper waits
    0.5 s after they reparent (init reaps when it next runs)."""
    with orphaning_zombies(3) as (parent, zpids):
        stop = threading.Event()

        def slow_reaper() -> None:
            while not stop.is_set() and not all(
                    _parent_of(z) == os.getpid() for z in zpids):
                time.sleep(0.01)
            stop.wait(0.5)
            for z in zpids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(z, 0)

        reaper = threading.Thread(target=slow_reaper)
        reaper.start()
        try:
            act = ReapZombies(_reap_params(parents=[parent.pid]))
            c = ctx()
            out = act.apply(act.plan(c), c)
        finally:
            stop.set()
            reaper.join()
        assert out.ok and out.verified, out
        [res] = out.data["parents"]
        assert res["reaped"] == 3 and res["moved_to"] == {}


def _parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def test_zombies_that_only_move_to_a_non_reaping_parent_are_reported() -> None:
    with orphaning_zombies(3) as (parent, _):
        act = ReapZombies(_reap_params(parents=[parent.pid], reparented_wait="0.5s"))
        c = ctx()
        out = act.apply(act.plan(c), c)
        assert not out.ok and out.verified is False
        [res] = out.data["parents"]
        assert res["signals"] == ["SIGCHLD", "SIGTERM"]
        assert res["moved_to"] == {os.getpid(): 3}
        assert f"3 moved to pid {os.getpid()}, which did not reap" in out.error


def test_pid1_kernel_threads_and_guardian_itself_are_refused(tmp_path: Path) -> None:
    """Recorded tree (PID 1 and kthreadd with zombies, which must never be made on a real
    host) plus a real zombie whose parent is this very process (guardian)."""
    fake = FakeHost(tmp_path)
    for pid, comm, state, ppid, flags in [
            (1, "init", "S", 0, 0x400100), (2, "kthreadd", "S", 0, 0x208040),
            (500, "orphan", "Z", 1, 0x400000), (600, "kworker", "Z", 2, 0x4208060)]:
        fake.process(pid, comm, state, ppid, flags)
    fake.write("proc/uptime", "1000.0 100.0\n")
    act = ReapZombies(_reap_params())
    plan = act.plan(ctx(host=fake.host))
    assert plan.steps == []
    assert any("pid 1 (init)" in r and "PID 1 is never a target" in r for r in plan.skipped)
    # pid 600's parent is kthreadd, a kernel thread; its zombie is a kernel thread too
    assert not any("pid 2 " in s.target for s in plan.steps)
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        wait_until(lambda: is_zombie_of(child, os.getpid()), "our child a zombie")
        real = act.plan(ctx())
        assert any("guardian itself is never a target" in r for r in real.skipped)
        assert not any(f"pid {os.getpid()} " in s.target for s in real.steps)
    finally:
        os.waitpid(child, 0)


def test_a_parent_gone_between_plan_and_apply_is_a_recorded_no_op() -> None:
    need_root()
    with zombies(2) as parent:
        act = ReapZombies(_reap_params(parents=[parent.pid]))
        c = ctx()
        plan = act.plan(c)
    out = act.apply(plan, c)  # the helper reaped them and exited
    assert out.ok
    [res] = out.data["parents"]
    assert res["signals"] == [] and "parent exited" in res["note"] and res["reaped"] == 2


def test_reap_params_are_validated() -> None:
    with pytest.raises(ValueError):
        ReapParams.model_validate({"ladder": [{"signal": "SIGFOO"}]})
    with pytest.raises(ValueError):
        ReapParams.model_validate({"ladder": []})
    assert LadderStep(signal="SIGKILL", wait="1s").wait == 1.0


# -- memcg ---------------------------------------------------------------------------------

def test_dying_memcgs_fall_after_drop_caches() -> None:
    need_memcg_v1()
    with dying_memcgs(30):
        act = MemcgRelease(MemcgParams(sync_first=True, settle=0.5))
        c = ctx()
        plan = act.plan(c)
        assert plan.steps[-1].change == "write 1: free clean page cache"
        before = plan.data["dying_before"]
        assert before is not None
        out = act.apply(plan, c)
        assert out.ok and out.verified, out
        assert out.data["dying_after"] <= before - 25
        assert out.data["released"] >= 25


def test_reclaim_is_refused_without_cgroup_v2() -> None:
    need_memcg_v1()
    act = MemcgRelease(MemcgParams(method="reclaim", cgroup="system.slice"))
    plan = act.plan(ctx())
    assert plan.refused and "cgroup v2" in plan.refused[0]
    assert not act.apply(plan, ctx()).ok


def test_reclaim_writes_the_amount_on_a_v2_tree(tmp_path: Path) -> None:
    """Recorded cgroup v2 tree (this VM has no v2 memory controller); memory.reclaim is a
    plain file here, so the test sees exactly what was written."""
    import shutil
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "cgroup2", root)
    target = root / "sys/fs/cgroup/system.slice/memory.reclaim"
    target.parent.mkdir(parents=True)
    target.write_text("")
    act = MemcgRelease(MemcgParams(method="reclaim", cgroup="system.slice", amount="512M",
                                   settle=0))
    c = ctx(host=Host(root))
    plan = act.plan(c)
    assert plan.steps[0].change == "write 512M" and plan.data["dying_before"] == 68441
    out = act.apply(plan, c)
    assert out.ok and target.read_text() == "512M"
    assert out.verified is False  # the recorded count does not change


# -- irq -----------------------------------------------------------------------------------

def test_a_real_irq_is_moved_and_restored(tmp_path: Path) -> None:
    need_root()
    irqs = interface_irqs(Host(), "eth0")
    online = parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text())
    if not irqs or len(online) < 2:
        pytest.skip("needs eth0 with MSI IRQs and two cores")
    originals = {i: Path(f"/proc/irq/{i}/smp_affinity_list").read_text().strip()
                 for i in irqs}
    state = str(tmp_path / "irq.json")
    try:
        act = IrqMove(IrqParams(interface="eth0", from_cores=[online[0]],
                                to_cores=[online[1]], state_file=state))
        c = ctx()
        plan = act.plan(c)
        moved = plan.data["moves"]
        assert moved, plan
        out = act.apply(plan, c)
        assert out.ok and out.verified, out
        for m in moved:
            now = Path(f"/proc/irq/{m['irq']}/smp_affinity_list").read_text().strip()
            assert now == str(online[1])
        # a second run does not overwrite the saved original
        act.apply(act.plan(c), c)
        saved = json.loads(Path(state).read_text())
        assert {int(k): v for k, v in saved.items()} == {
            m["irq"]: m["old"] for m in moved}
        proc = subprocess.run([sys.executable, "-m", "guardian", "irq", "restore",
                               "--state", state], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for m in moved:
            now = Path(f"/proc/irq/{m['irq']}/smp_affinity_list").read_text().strip()
            assert now == m["old"]
        assert json.loads(Path(state).read_text()) == {}
    finally:
        for irq, cpus in originals.items():
            Path(f"/proc/irq/{irq}/smp_affinity_list").write_text(cpus + "\n")


def test_irq_move_refuses_while_irqbalance_runs(tmp_path: Path) -> None:
    """A stand-in irqbalance: a real process of ours whose comm is 'irqbalance' (a copy of
    sleep under that name)."""
    need_root()
    import shutil
    binary = tmp_path / "irqbalance"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    fake = subprocess.Popen([str(binary), "30"])
    try:
        act = IrqMove(IrqParams(interface="eth0", from_cores=[0],
                                state_file=str(tmp_path / "s.json")))
        plan = act.plan(ctx())
        assert plan.refused and f"irqbalance runs (pid {fake.pid})" in plan.refused[0]
        # the executor never applies a plan that refuses (the one path to apply())
        done = Executor(Host(), dry_run=False).act("irq.move", act, Snapshot(0.0))
        assert done.refused and done.outcome is None and "irqbalance" in done.error
        ignore = IrqMove(IrqParams(interface="eth0", from_cores=[0], irqbalance="ignore",
                                   state_file=str(tmp_path / "s.json")))
        assert "may undo" in ignore.plan(ctx()).note
    finally:
        fake.kill()
        fake.wait()


def test_a_user_process_named_irqbalance_does_not_stop_irq_move() -> None:
    """Before: any user who named a process `irqbalance` made irq.move refuse. The
    daemon is the one run by root."""
    need_root()
    import shutil
    import tempfile
    home = Path(tempfile.mkdtemp(prefix="guardian-irq-"))  # a path nobody can run from
    home.chmod(0o755)
    binary = home / "irqbalance"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    impostor = subprocess.Popen([str(binary), "30"], user=65534, group=65534)
    try:
        act = IrqMove(IrqParams(interface="eth0", from_cores=[0],
                                state_file=str(home / "s.json")))
        plan = act.plan(ctx())
        assert not any("irqbalance" in r for r in plan.refused), plan.refused
    finally:
        impostor.kill()
        impostor.wait()
        shutil.rmtree(home)


def test_irq_move_takes_hot_cores_from_the_snapshot() -> None:
    need_root()
    values = {"cpu.core.kernel_pct": family("cpu", {"0": 99.0, "1": 3.0}),
              "cpu.core.hot": family("cpu", {"0": 1.0, "1": 0.0})}
    plan = IrqMove(IrqParams(interface="eth0", irqbalance="ignore")).plan(ctx(values))
    assert all(m["new"] == "1" for m in plan.data.get("moves", []))
    calm = {"cpu.core.kernel_pct": family("cpu", {"0": 5.0}),
            "cpu.core.hot": family("cpu", {"0": 0.0})}
    assert IrqMove(IrqParams(interface="eth0")).plan(ctx(calm)).note == \
        "no hot core: nothing to move"


# -- systemd unit --------------------------------------------------------------------------

CRASHY = """[Unit]
Description=a unit that crash-loops, like the incident's
StartLimitIntervalSec=0

[Service]
ExecStart=/bin/false
Restart=always
RestartSec=100ms

[Install]
WantedBy=multi-user.target
"""


@pytest.mark.os_integration  # boots a container: the default interpreter only
def test_crash_looping_unit_is_stopped_and_masked_under_real_systemd() -> None:
    with booted() as c:
        c.write("/usr/lib/systemd/system/crashy.service", CRASHY)
        c.run("systemctl", "daemon-reload")
        c.run("systemctl", "enable", "--now", "crashy.service")
        c.run("systemd-run", "--unit=steady", "/bin/sleep", "600")
        systemctl = [*c.enter, "systemctl"]
        src = SystemdSource(Host(), SystemdSource.Config(systemctl=systemctl,
                                                         restart_window="1m"))
        src.collect(0.0)
        time.sleep(1.5)
        snap = Snapshot(1.5, {"systemd.unit_restarts_recent": cast(
            Value, src.collect(1.5)["systemd.unit_restarts_recent"])})
        act = SystemdUnit(UnitParams(allow=["*"], deny=["steady*"], verbs=["stop", "mask"],
                                     systemctl=systemctl, min_restarts=3))
        actx = ActionContext("r", snap, Host(), dry_run=False)
        plan = act.plan(actx)
        assert plan.data["units"] == ["crashy.service"], plan
        assert [s.change.split(" (")[0].split()[-2:] for s in plan.steps] == [
            ["stop", "crashy.service"], ["mask", "crashy.service"]]
        assert "restarts in the window)" in plan.steps[0].change
        out = act.apply(plan, actx)
        assert out.ok and out.verified, out
        state = c.run("systemctl", "show", "-p", "ActiveState,UnitFileState",
                      "crashy.service").stdout
        assert "ActiveState=inactive" in state or "ActiveState=failed" in state
        assert "UnitFileState=masked" in state
        assert c.run("systemctl", "is-active", "steady.service").stdout.strip() == "active"
        # a unit gone between plan and apply is a recorded no-op
        gone = SystemdUnit(UnitParams(allow=["*"], units=["vanished.service"],
                                      systemctl=systemctl))
        out2 = gone.apply(gone.plan(actx), actx)
        assert out2.ok and out2.data["units"][0]["note"] == "unit is gone: no-op"
        # Before: the action ran its own argv (`systemctl`, which the image lacks) whatever
        # the source used. Over systemd's private bus, as the source reaches it, with no
        # systemctl program at all (run in the container's PID namespace: systemd
        # refuses a peer whose PID it cannot see)
        c.write("/usr/lib/systemd/system/crashy2.service", CRASHY)
        c.run("systemctl", "daemon-reload")
        c.run("systemctl", "enable", "--now", "crashy2.service")
        probe = c.python_in_pid_namespace(OVER_THE_BUS, c.private_socket, "crashy2.service")
        stdout, _ = probe.communicate(timeout=120)
        over_bus = json.loads(stdout)
        assert over_bus["ok"] and over_bus["verified"], over_bus
        assert over_bus["steps"][0].startswith("systemd (bus) stop crashy2.service")
        state = c.run("systemctl", "show", "-p", "ActiveState,UnitFileState",
                      "crashy2.service").stdout
        assert "ActiveState=inactive" in state or "ActiveState=failed" in state
        assert "UnitFileState=masked" in state


OVER_THE_BUS = r"""
import json, sys
from pathlib import Path
from guardian.actions.systemd import SystemdUnit, UnitParams
from guardian.hostio.host import Host
from guardian.hostio.systemdclient import SystemdSettings, configure
from guardian.plugin.contract import ActionContext
from guardian.core.snapshot import Snapshot
from tests.support.checkout import FIXTURES

# what the systemd source registers when it talks to systemd over its bus
configure(Path("/"), SystemdSettings("dbus", ("no-such-systemctl",), sys.argv[1], 30.0))
act = SystemdUnit(UnitParams(allow=["*"], units=[sys.argv[2]], verbs=["stop", "mask"]))
ctx = ActionContext("r", Snapshot(0, {}), Host(), dry_run=False)
plan = act.plan(ctx)
out = act.apply(plan, ctx)
print(json.dumps({"ok": out.ok, "verified": out.verified, "error": out.error,
                  "steps": [s.change for s in plan.steps], "data": out.data}, default=str))
"""


def test_the_action_reaches_systemd_as_the_source_does(tmp_path: Path) -> None:
    """Before: `systemd.unit` ran its own default argv (`systemctl`) whatever the systemd
    source was configured with (here a program of the test's own, as an nsenter prefix
    would be)."""
    calls = tmp_path / "calls"
    fake = tmp_path / "fake-systemctl"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
case "$1" in
  show) printf 'LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=enabled\n' ;;
esac
""")
    fake.chmod(0o755)
    root = tmp_path / "host"
    root.mkdir()
    SystemdSource(Host(root), SystemdSource.Config(systemctl=[str(fake)],
                                                   transport="systemctl"))
    act = SystemdUnit(UnitParams(allow=["*"], units=["a.service"]))
    c = ctx(host=Host(root))
    plan = act.plan(c)
    assert plan.steps[0].change.startswith(f"{fake} stop a.service")
    out = act.apply(plan, c)
    assert out.ok and out.verified, out
    assert "stop -- a.service" in calls.read_text().splitlines()


def test_a_systemctl_that_cannot_run_is_named() -> None:
    """Before: `apply raised FileNotFoundError(2, 'No such file or directory')`, naming no
    program."""
    act = SystemdUnit(UnitParams(allow=["*"], units=["a.service"],
                                 systemctl=["/nonexistent/nsenter", "--", "systemctl"]))
    c = ctx()
    out = act.apply(act.plan(c), c)
    assert not out.ok
    assert "cannot run '/nonexistent/nsenter' (the systemctl argv: /nonexistent/nsenter " \
           "-- systemctl): No such file or directory" in out.error, out.error


def test_units_guardian_must_never_touch_are_refused() -> None:
    from guardian.core.snapshot import labels_of
    fam = {labels_of({"unit": u}): 50.0 for u in
           ("systemd-journald.service", "kubelet.service", "guardian.service", "ecs.service")}
    act = SystemdUnit(UnitParams(allow=["*"]))
    plan = act.plan(ActionContext("r", Snapshot(0, {"systemd.unit_restarts_recent": fam}),
                                  Host(), dry_run=True))
    assert plan.data["units"] == ["ecs.service"]
    assert len(plan.skipped) == 3


def test_no_systemd_data_means_no_unit_is_targeted() -> None:
    act = SystemdUnit(UnitParams(allow=["*"]))
    plan = act.plan(ctx())
    assert plan.data == {} and "systemd source is unavailable" in plan.refused[0]


def test_signals_never_reach_pid1_even_if_asked() -> None:
    act = ReapZombies(_reap_params(parents=[1], protect=[]))
    out = act.apply(type(act.plan(ctx()))(  # a hand-made plan naming PID 1
        "reap.zombies", "r", data={"targets": [{"ppid": 1, "comm": "x", "start": int(
            Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]),
            "zombies": [(999999, 1)]}]}), ctx())
    assert out.data["parents"][0]["signals"] == []
    assert "refused at apply: PID 1 is never a target" in out.data["parents"][0]["note"]

