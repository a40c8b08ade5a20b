"""The fleet budget's counting rules: pure, clock-free, no I/O.

How many nodes may be disrupted at once and whether a node may start disrupting, from
counts alone: :class:`guardian.kube.fleet.FleetBudget` applies them to the Leases and node
objects of a cluster, the fleet backtest (:mod:`guardian.runtime.backtest`) to its
simulated nodes, so both judge alike."""

from __future__ import annotations

import math
from collections.abc import Collection


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
