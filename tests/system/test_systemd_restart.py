"""systemd.unit's restart verbs (restart, try-restart, reload): the per-unit budget, the
cooldown (node-problem-detector's health checker: a unit is repaired only once "the
service has been up for the cool down period", timed from InactiveExitTimestamp,
pkg/healthchecker/health_checker.go and health_checker_linux.go; --cooldown-time 2m), the
node's agent and runtime protected unless named, and the wait until the unit is active
again: against a stand-in systemctl here, and the real systemd 252 in nspawn below."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardian.actions.systemd import SystemdUnit, UnitParams
from guardian.core.snapshot import Snapshot
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext
from guardian.testing.nspawn import booted


@pytest.fixture(autouse=True)
def state(tmp_path: Path) -> Iterator[str]:
    """The restart budget's record in a directory of the test's own."""
    d = tmp_path / "state"
    d.mkdir()
    yield str(d)


def ctx() -> ActionContext:
    return ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False)


def params(state: str, **kw: object) -> UnitParams:
    return UnitParams.model_validate({"state_dir": state, **kw})


def fake_systemctl(tmp_path: Path, up_for: float, restart_works: bool = True) -> list[str]:
    """A systemctl whose units have run ``up_for`` seconds; a restart moves their
    InactiveExitTimestampMonotonic to now (or, when it does not work, leaves them failed).
    Its calls are logged in tmp_path/calls."""
    state = tmp_path / "started"
    state.write_text(str(int((time.monotonic() - up_for) * 1e6)))
    fake = tmp_path / "systemctl"
    now_us = "$(awk '{printf \"%d\", $1 * 1000000}' /proc/uptime)"
    active = "active" if restart_works else "failed"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
case "$1" in
  show) printf 'LoadState=loaded\\nActiveState=%s\\nSubState=running\\n' \\
          "$(cat {tmp_path}/active 2>/dev/null || echo active)"
        printf 'UnitFileState=enabled\\nInactiveExitTimestampMonotonic=%s\\n' \\
          "$(cat {state})" ;;
  restart|try-restart) echo {now_us} > {state}; echo {active} > {tmp_path}/active ;;
esac
""")
    fake.chmod(0o755)
    return [str(fake)]


def test_restart_waits_for_a_new_start_and_spends_the_budget(tmp_path: Path,
                                                            state: str) -> None:
    argv = fake_systemctl(tmp_path, up_for=600)
    act = SystemdUnit(params(state, allow=["web*"], units=["web.service"],
                             verbs=["restart"], systemctl=argv, restart_budget=2,
                             cooldown=120))
    for _ in range(2):
        plan = act.plan(ctx())
        assert plan.data["units"] == ["web.service"] and not plan.skipped
        assert plan.steps[0].change.endswith("restart web.service")
        out = act.apply(plan, ctx())
        assert out.ok and out.verified, out
        (tmp_path / "started").write_text(str(int((time.monotonic() - 600) * 1e6)))
    # two restarts within the hour: the budget is spent, for guardian restarted too
    for again in (act, SystemdUnit(act.params)):
        plan = again.plan(ctx())
        assert plan.data["units"] == [] and plan.skipped == [
            "web.service: restart budget spent: 2 within 3600s (restart_budget)"]
    assert list(json.loads((Path(state) / "unit-restarts.json").read_text())) == [
        "web.service"]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"web.service": 3}',
                                  '{"web.service": ["soon"]}'])
def test_an_unreadable_restart_record_refuses_restarts(tmp_path: Path, state: str,
                                                       text: str) -> None:
    argv = fake_systemctl(tmp_path, up_for=600)
    act = SystemdUnit(params(state, allow=["web*"], units=["web.service"],
                             verbs=["restart"], systemctl=argv, restart_budget=2,
                             cooldown=120))
    record = Path(state) / "unit-restarts.json"
    record.write_text(text)
    plan = act.plan(ctx())
    assert not plan.steps and len(plan.refused) == 1
    assert f"the restart budget's record {record} cannot be read" in plan.refused[0]
    record.unlink()  # a missing record is an empty budget
    assert act.plan(ctx()).data["units"] == ["web.service"]
    assert "restart" not in (tmp_path / "calls").read_text().split()


def test_a_unit_up_less_than_the_cooldown_is_not_restarted(tmp_path: Path,
                                                           state: str) -> None:
    argv = fake_systemctl(tmp_path, up_for=30)
    act = SystemdUnit(params(state, allow=["web*"], units=["web.service"],
                             verbs=["restart"], systemctl=argv))
    plan = act.plan(ctx())
    assert plan.data["units"] == []
    assert plan.skipped[0].startswith("web.service: up only 3")
    assert plan.skipped[0].endswith("since it last started (cooldown 120s)")


def test_a_restart_that_leaves_the_unit_failed_is_not_verified(tmp_path: Path,
                                                               state: str) -> None:
    argv = fake_systemctl(tmp_path, up_for=600, restart_works=False)
    act = SystemdUnit(params(state, allow=["web*"], units=["web.service"],
                             verbs=["restart"], systemctl=argv, verify_wait=0.5))
    out = act.apply(act.plan(ctx()), ctx())
    assert not out.ok and "not active again within 0.5s (failed/running)" in out.error


def test_kubelet_and_runtimes_only_when_named_and_only_restarted(tmp_path: Path,
                                                                 state: str) -> None:
    argv = fake_systemctl(tmp_path, up_for=600)
    glob = SystemdUnit(UnitParams(allow=["*"], units=["kubelet.service"], verbs=["stop"],
                                  systemctl=argv))
    assert glob.plan(ctx()).skipped == ["kubelet.service: never touched (kubelet.service)"]
    by_glob = SystemdUnit(UnitParams(allow=["kube*"], min_restarts=0, verbs=["restart"],
                                     systemctl=argv))
    snap = Snapshot(0.0, {"systemd.unit_restarts_recent": {
        (("unit", "kubelet.service"),): 0.0}})
    plan = by_glob.plan(ActionContext("r", snap, Host(), dry_run=False))
    assert plan.skipped == ["kubelet.service: never touched (kubelet.service)"]
    named = SystemdUnit(params(state, allow=["kubelet.service"], units=["kubelet.service"],
                               verbs=["restart"], systemctl=argv))
    plan = named.plan(ctx())
    assert plan.data["units"] == ["kubelet.service"]
    assert named.apply(plan, ctx()).verified
    ssh = SystemdUnit(UnitParams(allow=["ssh.service"], units=["ssh.service"],
                                 verbs=["restart"], systemctl=argv))
    assert ssh.plan(ctx()).skipped == ["ssh.service: never touched (ssh*.service)"]


@pytest.mark.os_integration  # boots a container: the default interpreter only
def test_restart_under_real_systemd(state: str) -> None:
    with booted() as c:
        c.run("systemd-run", "--unit=web", "/bin/sleep", "600")
        c.run("systemd-run", "--unit=kubelet", "/bin/sleep", "600")
        systemctl = [*c.enter, "systemctl"]

        def started(unit: str) -> int:
            out = c.run("systemctl", "show", "-p", "InactiveExitTimestampMonotonic", unit)
            return int(out.stdout.strip().split("=")[1])

        web0, kubelet0 = started("web.service"), started("kubelet.service")
        # both units as the systemd source reports them; kubelet matched only by a glob
        snap = Snapshot(0.0, {"systemd.unit_restarts_recent": {
            (("unit", "kubelet.service"),): 0.0, (("unit", "web.service"),): 0.0}})
        sctx = ActionContext("r", snap, Host(), dry_run=False)
        act = SystemdUnit(params(state, allow=["*"], min_restarts=0, verbs=["restart"],
                                 systemctl=systemctl, cooldown=3600))
        plan = act.plan(sctx)  # just started: within the cooldown
        assert plan.data["units"] == [] and "cooldown 3600s" in plan.skipped[1]
        act = SystemdUnit(params(state, allow=["*"], min_restarts=0, verbs=["restart"],
                                 systemctl=systemctl, cooldown=0, restart_budget=1))
        plan = act.plan(sctx)
        assert plan.data["units"] == ["web.service"]  # kubelet: not named
        assert plan.skipped == ["kubelet.service: never touched (kubelet.service)"]
        out = act.apply(plan, sctx)
        assert out.ok and out.verified, out
        assert started("web.service") > web0 and started("kubelet.service") == kubelet0
        assert c.run("systemctl", "is-active", "web.service").stdout.strip() == "active"
        assert act.plan(sctx).skipped[-1].startswith("web.service: restart budget spent")
        (Path(state) / "unit-restarts.json").unlink()
        # named exactly: the node agent is restarted (the health checker's repair)
        kubelet = SystemdUnit(params(state, allow=["kubelet.service"], units=[
            "kubelet.service"], verbs=["restart"], systemctl=systemctl, cooldown=0))
        assert kubelet.apply(kubelet.plan(ctx()), ctx()).verified
        assert started("kubelet.service") > kubelet0
        # over systemd's private bus (RestartUnit), with no systemctl program
        probe = c.python_in_pid_namespace(OVER_THE_BUS, c.private_socket, "web.service",
                                          state)
        stdout, _ = probe.communicate(timeout=120)
        over_bus = json.loads(stdout)
        assert over_bus["ok"] and over_bus["verified"], over_bus
        assert c.run("systemctl", "is-active", "web.service").stdout.strip() == "active"


OVER_THE_BUS = r"""
import json, sys
from pathlib import Path
from guardian.actions.systemd import SystemdUnit, UnitParams
from guardian.hostio.host import Host
from guardian.hostio.systemdclient import SystemdSettings, configure
from guardian.plugin.contract import ActionContext
from guardian.core.snapshot import Snapshot

configure(Path("/"), SystemdSettings("dbus", ("no-such-systemctl",), sys.argv[1], 30.0))
act = SystemdUnit(UnitParams(allow=["*"], units=[sys.argv[2]], verbs=["restart"],
                             cooldown=0, state_dir=sys.argv[3]))
ctx = ActionContext("r", Snapshot(0, {}), Host(), dry_run=False)
plan = act.plan(ctx)
out = act.apply(plan, ctx)
print(json.dumps({"ok": out.ok, "verified": out.verified, "error": out.error,
                  "steps": [s.change for s in plan.steps], "data": out.data}, default=str))
"""
