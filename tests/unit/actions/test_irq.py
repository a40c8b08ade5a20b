"""irq.move picks the NICs by the driver bound to them (``driver = "ena"``), so the shipped
rule moves ``ens5``'s queue IRQs on Amazon Linux 2023 and Ubuntu, where there is no
``eth0``. Before: only ``interface = "eth0"``, and the rule refused on those hosts ("no
IRQs found for eth0"). On a fixture /sys tree (tests/support/sysfs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from guardian.actions.irq import IrqMove, IrqParams
from guardian.core.snapshot import Snapshot, Value
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext
from guardian.policy.loader import load_rules
from guardian.testing import family
from tests.support.checkout import REPO
from tests.support.sysfs import nic_host


def _ctx(host: Host, hot: dict[str, float]) -> ActionContext:
    values: dict[str, Value] = {"cpu.core.hot": family("cpu", hot),
                                "cpu.core.kernel_pct": family("cpu", {c: 99.0 * v for c, v
                                                                  in hot.items()})}
    return ActionContext("core-system-saturated", Snapshot(0.0, values), host,
                         dry_run=True)


def test_driver_ena_moves_the_queue_irqs_of_ens5(tmp_path: Path) -> None:
    host = nic_host(tmp_path).host
    plan = IrqMove(IrqParams(driver="ena")).plan(_ctx(host, {"0": 1, "1": 0, "2": 0, "3": 0}))
    assert not plan.refused, plan.refused
    moves = plan.data["moves"]
    # the queue vectors, not the management one (27), not the virtio NIC's
    assert [m["irq"] for m in moves] == [28, 29]
    assert [m["new"] for m in moves] == ["1", "2"] and all(m["old"] == "0-3" for m in moves)
    assert [s.target for s in plan.steps] == ["irq 28 (ens5-Tx-Rx-0)", "irq 29 (ens5-Tx-Rx-1)"]


def test_a_host_without_the_driver_refuses_saying_so(tmp_path: Path) -> None:
    host = nic_host(tmp_path).host
    plan = IrqMove(IrqParams(driver="mlx5_core")).plan(_ctx(host, {"0": 1, "1": 0}))
    assert plan.refused == ["no IRQs found for driver 'mlx5_core': no interface is bound "
                            "to it"]


def test_interface_and_driver_together_are_refused_at_load() -> None:
    with pytest.raises(ValidationError, match="set `interface` or `driver`, not both"):
        IrqParams(interface="ens5", driver="ena")


def test_the_shipped_rule_selects_ena_nics_by_driver(tmp_path: Path) -> None:
    """The shipped symptom remedy works on an AL2023 or Ubuntu node, whose ENA NIC is
    ens5, with no edit."""
    rules = load_rules([REPO / "rules"])
    [rule] = [r for r in rules.rules if r.name == "core-system-saturated"]
    [move] = [a.action for a in rule.actions if a.use == "irq.move"]
    assert isinstance(move, IrqMove)
    assert move.params.driver == "ena" and move.params.interface is None
    plan = move.plan(_ctx(nic_host(tmp_path).host, {"0": 1, "1": 0}))
    assert not plan.refused and [m["irq"] for m in plan.data["moves"]] == [28, 29]
