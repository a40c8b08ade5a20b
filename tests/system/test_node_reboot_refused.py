"""Round 4 of hostile input, node.reboot: a reboot systemd refused (StartUnit of
reboot.target failing: here systemctl exiting 1, as it does when polkit or a masked target
says no) was recorded as asked: the budget spent and every later plan "waiting for" a
reboot that never comes. Now only a reboot systemd accepted is recorded."""

from __future__ import annotations

import json
from pathlib import Path

from guardian import Host, Snapshot
from guardian.actions.node import NodeReboot, RebootParams
from guardian.plugin.contract import ActionContext

BOOT = "proc/sys/kernel/random/boot_id"


def test_a_reboot_systemd_refused_is_not_recorded_and_spends_nothing(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / BOOT).parent.mkdir(parents=True)
    (root / BOOT).write_text("1111aaaa-0000-4000-8000-000000000001\n")
    (root / "var/run").mkdir(parents=True)
    (root / "var/run/reboot-required").write_text("")
    (root / "var/lib/guardian").mkdir(parents=True)
    refuse = tmp_path / "systemctl"
    refuse.write_text("#!/bin/sh\necho 'Access denied' >&2\nexit 1\n")
    refuse.chmod(0o755)
    act = NodeReboot(RebootParams(systemctl=[str(refuse)], max_reboots=1))
    ctx = ActionContext("kernel-update", Snapshot(0.0, {}), Host(root), dry_run=False)
    out = act.apply(act.plan(ctx), ctx)
    assert not out.ok and "refused" in out.error
    record = root / "var/lib/guardian/reboots.json"
    assert json.loads(record.read_text())["reboots"] == []
    again = act.plan(ctx)  # neither "waiting for" it nor the budget spent
    assert not again.refused and not again.data.get("pending") and again.steps
