"""node.reboot: plan, apply, verify and audit with a stand-in systemctl, a boot id file and
the reboot sentinel under a host root; with a drain and the fleet budget against the API
stand-in (tests/support/kube_standin.py), where a restarted guardian (a new Executor and
FleetBudget, as after the reboot) finds its slot, renews it and gives it back when the
rule resolves in the new boot. systemd's side: ``systemctl reboot`` is StartUnit of
reboot.target in job mode replace-irreversibly (systemctl(1), org.freedesktop.systemd1(5));
kured's sentinel is /var/run/reboot-required."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.actions.node import NodeReboot, RebootParams
from guardian.core.audit import AuditLog
from guardian.core.diagnostics import RuleError
from guardian.hostio.host import resolve_under
from guardian.kube.fleet import FleetBudget, FleetParams
from guardian.model.kinds import DecisionKind
from guardian.plugin.contract import ActionContext
from tests.support.kube_standin import kubeconfig, serve

BOOT = "proc/sys/kernel/random/boot_id"


def host(tmp_path: Path, boot: str = "1111aaaa-0000-4000-8000-000000000001",
         required: bool = True) -> Host:
    root = tmp_path / "host"
    (root / BOOT).parent.mkdir(parents=True, exist_ok=True)
    (root / BOOT).write_text(boot + "\n")
    sentinel = root / "var/run/reboot-required"
    sentinel.parent.mkdir(parents=True, exist_ok=True)
    if required:
        sentinel.write_text("*** System restart required ***\n")
    else:
        sentinel.unlink(missing_ok=True)
    return Host(root)


def fake_systemctl(tmp_path: Path) -> list[str]:
    fake = tmp_path / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n')
    fake.chmod(0o755)
    return [str(fake)]


def calls(tmp_path: Path) -> list[str]:
    f = tmp_path / "calls"
    return f.read_text().splitlines() if f.exists() else []


def ctx(h: Host, kind: DecisionKind = "firing") -> ActionContext:
    return ActionContext("kernel-update", Snapshot(0.0, {}), h, dry_run=False, kind=kind)


def test_reboot_plan_apply_and_the_new_boot(tmp_path: Path) -> None:
    argv = fake_systemctl(tmp_path)
    act = NodeReboot(RebootParams(systemctl=argv))
    h = host(tmp_path, required=False)
    plan = act.plan(ctx(h))
    assert not plan.steps and plan.note == ("no reboot required (/var/run/reboot-required "
                                            "is absent): nothing to do")
    assert act.apply(plan, ctx(h)).ok and calls(tmp_path) == []
    h = host(tmp_path)
    plan = act.plan(ctx(h))
    record = h.root / "var/lib/guardian/reboots.json"
    assert [(s.target, s.change) for s in plan.steps] == [
        (str(record), "record reboot 1 of 1 within 86400s, asked in boot 1111aaaa"),
        ("node", f"{argv[0]}: StartUnit reboot.target (replace-irreversibly)")]
    # fleet = false here: the plan does not claim a fleet slot is held
    assert "verified once the node is back in a new boot" in plan.note
    assert "is held across" not in plan.note
    out = act.apply(plan, ctx(h))
    assert out.ok and out.verified is None  # only the new boot can verify it
    assert calls(tmp_path) == ["start --job-mode=replace-irreversibly --no-block -- "
                               "reboot.target"]
    [rec] = json.loads(record.read_text())["reboots"]
    assert rec["boot"] == "1111aaaa-0000-4000-8000-000000000001"
    assert rec["rule"] == "kernel-update"
    # the rule fires again before the node went down: no second request
    again = act.plan(ctx(h))
    assert not again.steps and "already asked for in this boot" in again.note
    pending = act.apply(again, ctx(h))
    assert pending.ok and pending.verified is None  # not verified until the new boot
    # resolved in the same boot: not back yet
    assert "has not rebooted yet" in act.plan(ctx(h, "resolved")).note
    # the new boot
    h = host(tmp_path, boot="2222bbbb-0000-4000-8000-000000000002")
    back = act.plan(ctx(h, "resolved"))
    assert [s.change for s in back.steps] == ["back in boot 2222bbbb (the reboot was asked "
                                              "in 1111aaaa)"]
    assert act.apply(back, ctx(h, "resolved")).verified is True
    # the sentinel again in the new boot: the budget (1 a day) is spent
    refused = act.plan(ctx(h))
    assert refused.refused == ["reboot budget spent: 1 reboot(s) within 86400s "
                               "(max_reboots 1)"]
    assert len(calls(tmp_path)) == 1


@pytest.mark.parametrize("text", ["{not json", '{"reboots": 3}', '{"reboots": ["x"]}',
                                  '{"reboots": [{"at": "soon"}]}', "[]"])
def test_an_unreadable_reboot_record_refuses_the_reboot(tmp_path: Path, text: str) -> None:
    argv = fake_systemctl(tmp_path)
    act = NodeReboot(RebootParams(systemctl=argv))
    h = host(tmp_path)
    record = h.root / "var/lib/guardian/reboots.json"
    record.parent.mkdir(parents=True)
    record.write_text(text)
    plan = act.plan(ctx(h))
    assert not plan.steps and len(plan.refused) == 1
    assert f"the reboot record {record} cannot be read" in plan.refused[0]
    assert act.plan(ctx(h, "resolved")).refused
    record.unlink()  # a missing record is an empty history
    assert act.plan(ctx(h)).steps and not act.plan(ctx(h)).refused
    assert calls(tmp_path) == []


def test_the_sentinel_is_found_through_the_hosts_own_var_run_link(tmp_path: Path) -> None:
    """Before: /var/run -> /run (absolute, as on Debian) under a host root led to this
    machine's /run, so a node's reboot-required was not seen from a DaemonSet's /host."""
    root = tmp_path / "host"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var/run").symlink_to("/run")
    (root / "run/reboot-required").write_text("")
    (root / "var/lib").mkdir()
    (root / "var/lib/up").symlink_to("../../run")
    assert resolve_under(root, "/var/run/reboot-required") == root / "run/reboot-required"
    assert resolve_under(root, "/var/lib/up/reboot-required") == root / "run/reboot-required"
    assert resolve_under(root, "/../../etc/passwd") == root / "etc/passwd"


def test_reboot_without_a_boot_id_or_through_a_missing_program_fails_safe(
        tmp_path: Path) -> None:
    h = host(tmp_path)
    (h.root / BOOT).unlink()
    act = NodeReboot(RebootParams(systemctl=["/nonexistent/systemctl"]))
    assert act.plan(ctx(h)).refused[0].startswith("no boot id in")
    h = host(tmp_path)
    out = act.apply(act.plan(ctx(h)), ctx(h))
    assert not out.ok and "/nonexistent/systemctl" in out.error


FLEET_RULE = '''version = 1
[[rule]]
name = "kernel-update"
summary = "s"
when = "memcg.dying > 10"
fleet = true
  [[rule.action]]
  use = "node.reboot"
  on = "both"
  systemctl = ["{argv}"]
  drain = {{ kubeconfig = "{kc}", node = "node-a", interval = 0.05 }}
'''


def test_reboot_drains_holds_the_slot_across_the_reboot_and_uncordons(tmp_path: Path
                                                                      ) -> None:
    argv = fake_systemctl(tmp_path)
    with serve() as (url, store):
        store.add_node("node-a")
        store.add_node("node-b")
        store.add_pod("default", "web-1", "node-a", owner=("ReplicaSet", "web"))
        kc = str(kubeconfig(tmp_path, url))
        now = [dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc)]
        fleet_params = FleetParams(kubeconfig=kc, node="node-a", max_nodes=1, ttl=60)
        h = host(tmp_path)
        rules = load_text(FLEET_RULE.format(argv=argv[0], kc=kc))
        engine = Engine(rules)
        audit = tmp_path / "audit.jsonl"
        ex = Executor(h, dry_run=False, audit=AuditLog(audit),
                      fleet=FleetBudget(fleet_params, clock=lambda: now[0]))
        [done] = ex.run(engine.evaluate(Snapshot(0.0, {"memcg.dying": 50.0})),
                        Snapshot(0.0))
        assert done.result == "ok" and done.outcome is not None, done
        assert done.outcome.verified is None  # verified only in the new boot
        assert [s.change for s in done.plan.steps][:2] == [  # type: ignore[union-attr]
            "set cordon (claimed by rule kernel-update)",
            "evict (policy/v1 Eviction, grace its own); wait until gone"]
        assert ("default", "web-1") not in store.objects["pods"]
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is True
        assert calls(tmp_path)[-1].endswith("reboot.target")
        lease = store.objects["leases"][("kube-system", "guardian-slot-0")]
        assert lease["spec"]["holderIdentity"] == "node-a"
        # ... the node reboots; guardian starts again in a new boot, its engine state
        # restored (the rule still firing), a new Executor and FleetBudget
        h = host(tmp_path, boot="2222bbbb-0000-4000-8000-000000000002", required=False)
        now[0] += dt.timedelta(seconds=45)  # past the slot's renewal point, inside its TTL
        ex = Executor(h, dry_run=False, audit=AuditLog(audit),
                      fleet=FleetBudget(fleet_params, clock=lambda: now[0]))
        ex.run([], Snapshot(45.0))  # the first tick: the slot found again and renewed
        lease = store.objects["leases"][("kube-system", "guardian-slot-0")]
        assert lease["spec"]["holderIdentity"] == "node-a"
        assert lease["spec"]["renewTime"].startswith("2026-12-04T00:00:45")
        # node-b cannot take a slot meanwhile
        other = FleetBudget(FleetParams(kubeconfig=kc, node="node-b", max_nodes=1, ttl=60),
                            clock=lambda: now[0])
        assert other.hold("x")[0] is None
        [back] = ex.run(engine.evaluate(Snapshot(60.0, {"memcg.dying": 1.0})),
                        Snapshot(60.0))
        assert back.decision.kind == "resolved" and back.result == "ok", back
        assert back.outcome is not None and back.outcome.verified is True
        assert store.objects["nodes"][("", "node-a")]["spec"]["unschedulable"] is False
        lease = store.objects["leases"][("kube-system", "guardian-slot-0")]
        assert not lease["spec"].get("holderIdentity")  # given back
        entries = [json.loads(line) for line in audit.read_text().splitlines()]
        outcomes = [e["outcome"] for e in entries if e["type"] == "outcome"]
        assert outcomes[0]["data"]["drain"]["ok"] is True
        assert "back in a new boot (2222bbbb)" in outcomes[1]["detail"]


def test_a_reboot_on_a_kubernetes_node_needs_the_fleet_budget(tmp_path: Path) -> None:
    text = FLEET_RULE.format(argv="/bin/true", kc="/nonexistent").replace(
        '  drain = { kubeconfig = "/nonexistent", node = "node-a", interval = 0.05 }\n', "")
    with pytest.raises(RuleError, match=r"node\.reboot can disrupt every node at once"):
        load_text(text.replace("fleet = true\n", ""))
    rules = tmp_path / "r.toml"
    rules.write_text(text)
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", str(rules)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "node.reboot on a Kubernetes node needs the fleet budget" in proc.stdout
    env.pop("KUBERNETES_SERVICE_HOST")
    if not Path("/var/lib/kubelet").is_dir():  # not a Kubernetes node: no fleet needed
        proc = subprocess.run([sys.executable, "-m", "guardian", "check", str(rules)],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


REBOOT_OVER_THE_BUS = r"""
import json, sys
from pathlib import Path
from guardian.actions.node import NodeReboot, RebootParams
from guardian.hostio.host import resolve_under
from guardian.hostio.host import Host
from guardian.hostio.systemdclient import SystemdSettings, configure
from guardian.plugin.contract import ActionContext
from guardian.core.snapshot import Snapshot

root = Path(sys.argv[1])
configure(root, SystemdSettings("dbus", ("no-such-systemctl",), sys.argv[2], 30.0))
act = NodeReboot(RebootParams())
ctx = ActionContext("kernel-update", Snapshot(0, {}), Host(root), dry_run=False)
plan = act.plan(ctx)
out = act.apply(plan, ctx)
print(json.dumps({"ok": out.ok, "error": out.error, "note": plan.note,
                  "steps": [s.change for s in plan.steps], "data": out.data}))
"""


@pytest.mark.os_integration  # boots a container: the default interpreter only
def test_the_container_reboots_and_the_restarted_guardian_releases_its_slot(
        tmp_path: Path) -> None:
    """A real systemd 252 (nspawn) reboots on StartUnit(reboot.target) over its private
    bus (nspawn exits 133, "the container asked to be rebooted", systemd-nspawn(1)); nspawn
    gives each boot of the container a new boot id; the record kept in the state directory
    (a bind mount, as /var/lib/guardian is on a node) tells the new boot from the old."""
    from guardian.testing.nspawn import booted

    state = tmp_path / "state"
    state.mkdir()
    with serve() as (url, store):
        store.add_node("node-a")
        kc = str(kubeconfig(tmp_path, url))
        fleet_params = FleetParams(kubeconfig=kc, node="node-a", max_nodes=1, ttl=60)
        first = FleetBudget(fleet_params)
        assert first.hold("kernel-update")[0] == "guardian-slot-0"  # taken before
        with booted(rw_binds=[(str(state), "/var/lib/guardian")]) as c:
            c.run("touch", "/run/reboot-required")
            root = Path(f"/proc/{c.leader}/root")
            old_boot = (root / BOOT).read_text().strip()
            probe = c.python_in_pid_namespace(REBOOT_OVER_THE_BUS, str(root),
                                              c.private_socket)
            stdout, _ = probe.communicate(timeout=120)
            out = json.loads(stdout)
            assert out["ok"], out
            assert out["steps"][-1] == "systemd (bus): StartUnit reboot.target " \
                                       "(replace-irreversibly)"
            assert c.nspawn.wait(timeout=60) == 133  # it rebooted
        with booted(rw_binds=[(str(state), "/var/lib/guardian")]) as c:
            h = Host(Path(f"/proc/{c.leader}/root"))
            assert (h.root / BOOT).read_text().strip() != old_boot
            assert not (h.root / "run/reboot-required").exists()
            restarted = FleetBudget(fleet_params)  # guardian, started again
            restarted.renew()
            assert restarted.slot == "guardian-slot-0"
            act = NodeReboot(RebootParams())
            back = act.plan(ctx(h, "resolved"))
            assert back.steps[0].change.startswith("back in boot ")
            assert act.apply(back, ctx(h, "resolved")).verified is True
            restarted.done("kernel-update")  # what the executor does once it resolved
            lease = store.objects["leases"][("kube-system", "guardian-slot-0")]
            assert not lease["spec"].get("holderIdentity")


def test_a_slot_from_before_a_restart_is_looked_for_until_the_api_answers(
        tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a")
        kc = str(kubeconfig(tmp_path, url))
        fleet_params = FleetParams(kubeconfig=kc, node="node-a", max_nodes=1, ttl=60)
        assert FleetBudget(fleet_params).hold("kernel-update")[0] == "guardian-slot-0"
        restarted = FleetBudget(fleet_params)
        store.fail_next = [503]  # the API is not there at the first tick
        restarted.renew()
        assert restarted.slot is None and not restarted.adopted
        restarted.renew()
        assert restarted.slot == "guardian-slot-0"


def test_the_sentinel_is_looked_for_where_the_daemonset_mounts_the_nodes_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the DaemonSet the node's /run is at /host/run and GUARDIAN_REBOOT_SENTINEL says
    so (deploy/kubernetes/daemonset.yaml); the pod's own /var/run has no sentinel. Before:
    node.reboot looked only in the pod's /var/run/reboot-required: never a reboot."""
    argv = fake_systemctl(tmp_path)
    h = host(tmp_path, required=False)  # the pod's /var/run: no sentinel there
    (h.root / "host/run").mkdir(parents=True)
    (h.root / "host/run/reboot-required").write_text("*** System restart required ***\n")
    monkeypatch.delenv("GUARDIAN_REBOOT_SENTINEL", raising=False)
    plan = NodeReboot(RebootParams(systemctl=argv)).plan(ctx(h))
    assert not plan.steps and "/var/run/reboot-required is absent" in plan.note
    monkeypatch.setenv("GUARDIAN_REBOOT_SENTINEL", "/host/run/reboot-required")
    plan = NodeReboot(RebootParams(systemctl=argv)).plan(ctx(h))
    assert [s.target for s in plan.steps][-1] == "node", plan.note
    # a rule's own sentinel wins over the setting; an empty one: always
    mine = NodeReboot(RebootParams(systemctl=argv, sentinel="/var/run/reboot-required"))
    assert "/var/run/reboot-required is absent" in mine.plan(ctx(h)).note
    (h.root / "host/run/reboot-required").unlink()
    assert "/host/run/reboot-required is absent" in \
        NodeReboot(RebootParams(systemctl=argv)).plan(ctx(h)).note
    assert NodeReboot(RebootParams(systemctl=argv, sentinel="")).plan(ctx(h)).steps
    assert calls(tmp_path) == []
