"""Node groups' own fleet budgets (issue 45), pure (guardian.model.budget.admit): a node
of a group with its own budget is counted among that group's nodes, and [fleet]'s budget,
over every node, must admit it too; a node in no group with a budget counts in [fleet]'s
alone; a node whose labels are unknown cannot be placed in a pool and is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.model import budget
from guardian.model.budget import Limits, admit
from guardian.model.nodegroups import NodeGroup
from guardian.plugin.registry import Registry
from guardian.runtime.config import load_config

GPU = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_nodes=1)
CANARY = NodeGroup(name="canary", labels={"canary": "true"}, mode="shadow")
GROUPS = [CANARY, GPU]
NODES: dict[str, dict[str, str] | None] = {
    "g1": {"pool": "gpu"}, "g2": {"pool": "gpu"}, "g3": {"pool": "gpu"},
    "gc": {"pool": "gpu", "canary": "true"},  # first match: the canary group (no budget)
    "c1": {"pool": "cpu"}, "c2": {"pool": "cpu"}}
ALL = set(NODES)
ROOMY = Limits(max_nodes=10)


def test_a_group_budget_counts_among_its_own_nodes_only() -> None:
    assert admit("g2", NODES, ALL, {"g1"}, ROOMY, GROUPS) == (
        "node group gpu: 1 other node(s) already disrupted (g1); at most 1 at once")
    # nodes of other groups, or of none, do not count against it
    assert admit("g2", NODES, ALL, {"c1", "c2", "gc"}, ROOMY, GROUPS) == ""
    # a node in no group with a budget counts in [fleet]'s alone: gpu's full pool is
    # no matter to it (nor to the canary, placed by its first match)
    assert admit("c2", NODES, ALL, {"g1"}, ROOMY, GROUPS) == ""
    assert admit("gc", NODES, ALL, {"g1"}, ROOMY, GROUPS) == ""
    # without the group's budget, the same count admits g2
    assert admit("g2", NODES, ALL, {"g1"}, ROOMY, [CANARY, GPU.model_copy(
        update={"max_nodes": None})]) == ""


def test_the_fleet_budget_bounds_every_group() -> None:
    """Both must admit: a node the group has room for waits while the fleet is full."""
    two = [CANARY, GPU.model_copy(update={"max_nodes": 2})]
    assert admit("g2", NODES, ALL, {"g1"}, ROOMY, two) == ""
    assert admit("g2", NODES, ALL, {"g1"}, Limits(max_nodes=1), two) == (
        "1 other node(s) already disrupted (g1); at most 1 at once")
    assert admit("g2", NODES, ALL, {"c1"}, Limits(max_nodes=1), two) == (
        "1 other node(s) already disrupted (c1); at most 1 at once")


def test_a_groups_min_healthy_and_percent_count_its_nodes() -> None:
    share = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_percent=50,
                      min_healthy="75%")
    # 3 gpu nodes, 2 Ready: below 75% of them (the other four nodes are Ready)
    assert admit("g1", NODES, ALL - {"g3"}, set(), ROOMY, [CANARY, share]) == (
        "node group gpu: only 2 of 3 nodes Ready and undisrupted, below min_healthy 75%")
    assert admit("g1", NODES, ALL, set(), ROOMY, [CANARY, share]) == ""
    # without the canary group, gc is a gpu node: 2 of 4 undisrupted
    assert admit("g1", NODES, ALL, {"g2", "g3"}, ROOMY, [share]) == (
        "node group gpu: only 2 of 4 nodes Ready and undisrupted, below min_healthy 75%")
    # 50% of its 3 nodes rounds down to one slot (of 4: two)
    half = NodeGroup(name="gpu", labels={"pool": "gpu"}, max_percent=50)
    assert admit("g1", NODES, ALL, {"g2"}, ROOMY, [CANARY, half]) == (
        "node group gpu: 1 other node(s) already disrupted (g2); at most 1 at once")
    assert admit("g1", NODES, ALL, {"g2"}, ROOMY, [half]) == ""
    assert Limits.of(share) == Limits(None, 50, "75%") and Limits.of(CANARY) is None


def test_a_node_whose_labels_are_unknown_is_refused_where_groups_have_budgets() -> None:
    unknown = {**NODES, "x": None}
    assert admit("x", unknown, ALL | {"x"}, set(), ROOMY, GROUPS) == budget.UNPLACED
    assert admit("x", unknown, ALL | {"x"}, set(), ROOMY, [CANARY]) == ""
    # another node's unknown labels: in no group's pool, counted fleet-wide
    assert admit("g1", unknown, ALL, set(), ROOMY, GROUPS) == ""


def test_a_group_budget_in_guardian_toml(tmp_path: Path) -> None:
    pytest.importorskip("lightkube")  # [fleet] is the Kubernetes extra's
    path = tmp_path / "guardian.toml"
    path.write_text('[fleet]\nnode = "x"\n\n[[group]]\nname = "gpu"\n'
                    'labels = { pool = "gpu" }\nmax_nodes = 2\nmin_healthy = "90%"\n')
    config = load_config(path, Registry())
    assert Limits.of(config.groups[0]) == Limits(2, None, "90%")
    for text, said in (
            ('[[group]]\nname = "gpu"\nmax_percent = 10\n',
             "guardian.toml:3:1: node group 'gpu' has its own fleet budget, which is "
             "counted in [fleet]'s Leases and bounded by [fleet]'s budget: set [fleet] too"),
            ('[fleet]\nnode = "x"\n[[group]]\nname = "GPU_a"\nmax_nodes = 1\n',
             "[[group]] 'GPU_a': a node group with its own budget has its name in its "
             "slots' Lease names"),
            ('[fleet]\nnode = "x"\n[[group]]\nname = "gpu"\nmin_healthy = "most"\n',
             "guardian.toml:5:15: [[group]] 'gpu': min_healthy: min_healthy 'most': "
             "expected a count or a percentage")):
        path.write_text(text)
        with pytest.raises(RuleError) as err:
            load_config(path, Registry())
        assert said in str(err.value)
