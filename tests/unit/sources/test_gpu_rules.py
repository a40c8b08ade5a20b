"""The gpu source's output fed to the shipped rules (rules/gpu-nvml.toml) through the
engine, tick by tick: what the rules see is what the source publishes over the recorded
NVML (tests/support/nvml_recorded.py, tests/fixtures/nvml/h100x8.json: shaped from
nvml.h, no GPU in this session), never series written for the rule test by hand."""

from __future__ import annotations

import copy
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from guardian import Engine
from guardian.actions.gpu import GpuReset, ResetParams
from guardian.core.snapshot import labels_of
from guardian.core.xid import ACTION_NAMES
from guardian.engine.decision import Decision
from guardian.hostio.host import Host
from guardian.hostio.nvml import Nvml
from guardian.plugin.contract import ActionContext
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.gpu import GpuConfig, GpuSource
from tests.support.nvml_recorded import RecordedNvml, load

RULES = load_rules([Path(__file__).resolve().parents[3] / "rules" / "gpu-nvml.toml"])
H100 = load("h100x8.json")
TICK = 30.0


def _quiet() -> dict[str, Any]:
    """The recorded node without its Xid and without GPUs that fall off the bus: only
    what a test makes happens."""
    rec = copy.deepcopy(H100)
    rec["events"], rec["later"] = [], {}
    return rec


class _Node:
    """The source over a recorded NVML, collected and evaluated every TICK seconds."""

    def __init__(self, rec: dict[str, Any], tmp_path: Path) -> None:
        self.nvml = RecordedNvml(rec)
        self.source = GpuSource(Host(tmp_path), GpuConfig.model_validate({"gpus": "expected"}),
                                reader=lambda: Nvml(self.nvml))
        self.collector = Collector(Host(tmp_path), [self.source])
        self.engine = Engine(RULES)
        self.now = 0.0
        self.host = Host(tmp_path)

    def tick(self) -> list[Decision]:
        snap = self.collector.collect(self.now)
        self.last = snap
        self.now += TICK
        return self.engine.evaluate(snap)

    def firing(self) -> set[str]:
        return {name for name, st in self.engine.states.items() if st.phase == "firing"}


def test_the_first_xid_48_a_gpu_reports_plans_the_reset_of_that_gpu(tmp_path: Path) -> None:
    """Before: nvml.xid{...,code="48",action="reset_gpu"} appeared with the event at 1,
    so increase() had no earlier sample and gpu-nvml-needs-reset never fired: the ladder
    was never planned; and its condition, two comparisons joined by `or`, matched no
    member, so gpu.reset would have refused "no GPU named". Now nvml.xid_by_gpu has
    every GPU's actions at 0 from the first read, the rule compares one selector, and the
    decision names GPU 2: gpu.reset's plan targets exactly it."""
    node = _Node(_quiet(), tmp_path)
    for _ in range(3):  # GPU 3 is lost and GPU 2 waits on a remap: their rules fire
        assert "gpu-nvml-needs-reset" not in {d.rule for d in node.tick()}
    node.nvml.events = [(2, 48)]
    decisions = node.tick()
    fired = [d for d in decisions if d.rule == "gpu-nvml-needs-reset"]
    assert [d.kind for d in fired] == ["firing"], decisions
    assert [a.use for a in fired[0].actions] == ["log", "gpu.reset"]
    assert fired[0].mode == "observe"  # shipped in shadow mode: planned, never applied
    matched = fired[0].evidence["matched"]
    assert isinstance(matched, dict)
    assert [dict(k)["gpu"] for k in matched] == ["2"]
    reset = GpuReset(ResetParams())
    reset.reader = lambda: Nvml(RecordedNvml(_quiet()))
    reset.runnable = lambda prog: None
    ctx = ActionContext(fired[0].rule, node.last, node.host, dry_run=True,
                        evidence=fired[0].evidence, kind="firing")
    plan = reset.plan(ctx)
    assert plan.refused == [] and plan.data["target"] == "00000000:3A:00.0"
    # the code stays in nvml.xid for people
    assert labels_of({"gpu": "2", "UUID": H100["gpus"][2]["uuid"], "pci_bus_id":
                      H100["gpus"][2]["pci_bus_id"], "code": "48", "action": "reset_gpu"}
                     ) in node.last.values["nvml.xid"]  # type: ignore[operator]


def test_an_xid_in_the_read_that_first_lists_its_gpu_fires_at_the_next(
        tmp_path: Path) -> None:
    """NVML gives events from registration on, made in the first read: an Xid taken in
    that same read has no earlier 0 to rise from, so it is counted at the next read."""
    rec = _quiet()
    rec["events"] = [[5, 79]]
    node = _Node(rec, tmp_path)
    node.tick()
    member = labels_of({"gpu": "5", "UUID": H100["gpus"][5]["uuid"],
                        "pci_bus_id": H100["gpus"][5]["pci_bus_id"], "action": "reboot"})
    assert node.last.values["nvml.xid_by_gpu"][member] == 0.0  # type: ignore[index]
    decisions = node.tick()
    assert node.last.values["nvml.xid_by_gpu"][member] == 1.0  # type: ignore[index]
    assert "gpu-nvml-needs-reset" in {d.rule for d in decisions if d.kind == "firing"}


def test_an_application_xid_plans_no_reset(tmp_path: Path) -> None:
    node = _Node(_quiet(), tmp_path)
    node.tick()
    node.nvml.events = [(0, 13)]
    decisions = node.tick()
    assert {d.rule for d in decisions if d.kind == "firing"} == {"gpu-nvml-application-errors"}


def _links(rec: dict[str, Any], gpu: int, **counters: int) -> None:
    for link in rec["gpus"][gpu]["nvlinks"]:
        link.update(counters)


@pytest.mark.parametrize("back", [False, True], ids=["goes-inactive", "and-comes-back"])
def test_an_nvlink_going_inactive_is_no_new_error(tmp_path: Path, back: bool) -> None:
    """Before: the source summed each counter over the active links, so when link 7 (with
    5000 replays and 2 recoveries) went down the sum fell, increase() read a counter reset
    and counted the remaining sum as new: gpu-nvml-link-errors fired with no new error,
    and again when the link came back. Now each link is its own member."""
    rec = _quiet()
    _links(rec, 0, replay=200, recovery=1)
    rec["gpus"][0]["nvlinks"][7].update(replay=5000, recovery=2)
    node = _Node(rec, tmp_path)
    for _ in range(3):
        node.tick()
    gpus = node.nvml.rec["gpus"]
    gpus[0]["nvlinks"][7]["state"] = 0
    for _ in range(4):
        node.tick()
    active = labels_of({"gpu": "0", "UUID": H100["gpus"][0]["uuid"],
                        "pci_bus_id": H100["gpus"][0]["pci_bus_id"]})
    assert node.last.values["nvml.nvlinks_active"][active] == 17.0  # type: ignore[index]
    if back:
        gpus[0]["nvlinks"][7]["state"] = 1
        for _ in range(4):
            node.tick()
    assert "gpu-nvml-link-errors" not in node.firing()
    # a real new recovery error on one link still fires; the evidence has the link
    gpus[0]["nvlinks"][3]["recovery"] = 2
    decisions = node.tick()
    fired = [d for d in decisions if d.rule == "gpu-nvml-link-errors"]
    assert [d.kind for d in fired] == ["firing"]
    recovery = fired[0].evidence['nvml.nvlink_errors{counter="recovery"}']
    assert isinstance(recovery, dict)
    assert recovery[labels_of({"gpu": "0", "UUID": H100["gpus"][0]["uuid"], "pci_bus_id":
                               H100["gpus"][0]["pci_bus_id"], "link": "3",
                               "counter": "recovery"})] == 2.0


def test_the_needs_reset_selector_picks_exactly_reset_gpu_and_reboot() -> None:
    """One glob selects both actions (a family comparison names the GPU; `or` would not):
    it must match no other action of the catalog's, now or as the catalog grows."""
    rule = RULES.by_name("gpu-nvml-needs-reset")
    assert rule is not None
    glob = re.search(r'nvml\.xid_by_gpu\{action="([^"]+)"\}', rule.spec.when)
    assert glob is not None
    assert [a for a in ACTION_NAMES if fnmatchcase(a, glob.group(1))] == ["reset_gpu", "reboot"]
