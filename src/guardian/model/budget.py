"""The fleet budget's counting rules: pure, clock-free, no I/O.

How many nodes may be disrupted at once and whether a node may start disrupting, from
counts alone: :class:`guardian.kube.fleet.FleetBudget` applies them to the Leases and node
objects of a cluster, the fleet backtest (:mod:`guardian.runtime.backtest`) to its
simulated nodes, so both judge alike.

A node group with a budget of its own (``[[group]]``'s ``max_nodes``, ``max_percent``,
``min_healthy``) is a second budget for its nodes, counted among them alone (the nodes
whose first matching group it is): :func:`admit` lets a node start disrupting only when
``[fleet]``'s budget, counted over every node, *and* its group's admit it. The fleet-wide
budget stays what the whole cluster tolerates at once: groups that each keep to their
own budget can still, together, take more nodes than the cluster can spare (a wave
across groups), and a group's own count cannot see that."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from guardian.model.nodegroups import NodeGroup, group_of

#: why a node may not start disrupting when groups have budgets and its labels are unknown
UNPLACED = ("this node's labels are not known (it is not among the nodes listed), so "
            "which node group's budget it counts in cannot be told")


@dataclass(frozen=True)
class Limits:
    """One budget's settings: ``[fleet]``'s, or a node group's own."""

    max_nodes: int | None = 1
    max_percent: float | None = None
    min_healthy: str = "0"

    @classmethod
    def of(cls, group: NodeGroup) -> Limits | None:
        """``group``'s own budget, or None when it has none."""
        if not group.has_budget:
            return None
        return cls(group.max_nodes, group.max_percent, group.min_healthy or "0")


def slots(nodes: int, max_nodes: int | None, max_percent: float | None) -> int:
    """How many of a fleet of ``nodes`` may be disrupted at once: ``max_nodes``, or
    ``max_percent`` of them rounded down (the smaller of the two when both), never
    below one."""
    limits = [n for n in (max_nodes, math.floor(nodes * max_percent / 100)
                          if max_percent else None) if n is not None]
    return max(1, min(limits)) if limits else 1


def healthy_needed(nodes: int, min_healthy: str) -> int:
    """The nodes that must be Ready and undisrupted for anyone to act: a count
    (``"3"``) or a percentage of the fleet rounded up (``"80%"``)."""
    if min_healthy.endswith("%"):
        return math.ceil(nodes * float(min_healthy[:-1]) / 100)
    return int(float(min_healthy))


def verdict(me: str, nodes: int, healthy: int, disrupted: Collection[str], limit: int,
            min_healthy: str) -> str:
    """Why node ``me`` may not start disrupting now, or "": ``healthy`` of the fleet's
    ``nodes`` are Ready and not ``disrupted`` (the nodes holding a slot, cordoned or
    carrying guardian's condition), and at most ``limit`` may be disrupted at once."""
    need = healthy_needed(nodes, min_healthy)
    if healthy < need:
        return (f"only {healthy} of {nodes} nodes Ready and undisrupted, below "
                f"min_healthy {min_healthy}")
    others = sorted(set(disrupted) - {me})
    if len(others) >= limit:
        shown = ", ".join(others[:5]) + (" …" if len(others) > 5 else "")
        return f"{len(others)} other node(s) already disrupted ({shown}); " \
               f"at most {limit} at once"
    return ""


def budget_group(labels: Mapping[str, str], groups: Sequence[NodeGroup]) -> NodeGroup | None:
    """The node group whose own budget a node with ``labels`` counts in (its first
    matching group, when that has a budget), or None: ``[fleet]``'s alone."""
    group = group_of(labels, groups)
    return group if group is not None and group.has_budget else None


def members(group: NodeGroup, labels: Mapping[str, Mapping[str, str] | None],
            groups: Sequence[NodeGroup]) -> set[str]:
    """The nodes of ``labels`` (name -> labels, None: unknown) whose first matching
    group is ``group``."""
    return {n for n, mine in labels.items()
            if mine is not None and group_of(mine, groups) is group}


def admit(me: str, labels: Mapping[str, Mapping[str, str] | None], ready: Collection[str],
          disrupted: Collection[str], fleet: Limits,
          groups: Sequence[NodeGroup] = ()) -> str:
    """Why node ``me`` may not start disrupting now, or "". ``labels``: every node of the
    fleet, with its labels (None: unknown); ``ready``: those Ready; ``disrupted``: those
    holding a slot (a holder no longer listed too), cordoned or carrying guardian's
    condition. ``fleet``'s budget is
    counted over every node; where ``me``'s node group has its own budget, that is
    counted among the group's nodes and must admit too (its reason then names the
    group)."""
    nodes, down = set(labels), set(disrupted)
    limit = slots(len(nodes), fleet.max_nodes, fleet.max_percent)
    why = verdict(me, len(nodes), len((set(ready) & nodes) - down), down, limit,
                  fleet.min_healthy)
    if why or not any(g.has_budget for g in groups):
        return why
    mine = labels.get(me)
    if mine is None:
        return UNPLACED
    group = budget_group(mine, groups)
    own = Limits.of(group) if group is not None else None
    if group is None or own is None:
        return ""
    pool = members(group, labels, groups)
    why = verdict(me, len(pool), len((set(ready) & pool) - down), down & pool,
                  slots(len(pool), own.max_nodes, own.max_percent), own.min_healthy)
    return f"node group {group.name}: {why}" if why else ""
