"""The correlated-failure breaker's judgement: pure, clock-free, no I/O.

When the same rule begins to fire on many nodes at about the same time the cause is
usually shared (a zone, a rack switch, a kernel or driver rollout, a bad rule), and
remediating them one by one is the wrong remedy (Karpenter's node-repair RFC,
kubernetes-sigs/karpenter #3192; NVSentinel's breaker). :func:`judge` says which (rule,
group) pairs trip and why; where the onsets come from, how a trip is latched and how it
holds actions is the caller's (``guardian.kube.breaker`` on a cluster, the fleet backtest
on a simulated clock).

Contract of :func:`judge`:

- ``nodes``: every node of the fleet, a rule holding on it or not (each node counts once
  in the denominator of every group it belongs to); per node its name, its labels and, for each
  rule whose condition holds on it now (pending or firing), the Unix time it began to
  hold (its latest onset).
- ``now``: the Unix time judged at (the caller's clock, real or simulated).
- A rule *began within the window* on a node when its onset is in ``[now - window, now]``
  (a node on which it has held for longer is an old, separate failure; an onset after
  ``now`` is a clock skew and counts as now). Pending counts: the breaker must hold the
  actions before a wave's ``for`` runs out, so its words say "began to hold", never
  "fired".
- Groups: the whole fleet (``fleet``), and for each label key in ``params.by`` one group
  per value of that key (``key=value``; nodes without the key form ``key=`` apart).
- A (rule, group) pair trips when the rule began within the window on at least
  ``min_nodes`` of the group's nodes **and** their share of the group's nodes is above
  ``share`` (strictly: 3 of 10 with ``share = 0.3`` does not trip). ``min_nodes`` keeps a pool of
  two from being frozen by one failing node (kubernetes-sigs/karpenter #2134).
- The result is sorted by rule, then group (``fleet`` first), with the numbers behind
  each trip; the same input always gives the same result. It never latches: latching
  (and releasing only by a human) is the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.durations import PositiveDuration, format_duration

FLEET = "fleet"  # the group of every node


class BreakerParams(BaseModel):
    """``[fleet.breaker]``: when the share of nodes on which the same rule began to hold
    trips it."""

    model_config = ConfigDict(extra="forbid")
    share: float = Field(0.3, gt=0, lt=1, description="trip when the same rule's "
                         "condition began to hold (pending or firing) within the window "
                         "on more than this share of a group's nodes")
    min_nodes: int = Field(3, ge=1, description="and at least this many of them (a pool "
                           "of two is not frozen by one failing node)")
    window: PositiveDuration = Field(600.0, description="a node counts when the rule's "
                                     "condition began to hold on it (pending or firing) "
                                     "within this long before now, and holds still")
    by: list[str] = Field(default_factory=list, description="node label keys: each "
                          "value of each key is a group judged apart (e.g. "
                          "topology.kubernetes.io/zone); the whole fleet is always "
                          "judged too")
    every: PositiveDuration = Field(30.0, description="on a cluster: how often a node on "
                                    "which a fleet rule began within the window judges "
                                    "the fleet (one list of the Nodes)")


@dataclass(frozen=True)
class NodeFiring:
    """One node as the breaker sees it: ``firing`` maps each rule whose condition holds
    on it now (pending or firing, as the node publishes it in ``guardian.io/firing``) to
    the Unix time it began to hold."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    firing: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Trip:
    """A (rule, group) pair over the bound, with the numbers why."""

    rule: str
    group: str  # FLEET, or "key=value"
    holding: int  # nodes of the group on which the rule began to hold within the window
    nodes: int  # nodes in the group
    share: float  # holding / nodes
    bound: float  # params.share
    window: float  # seconds
    names: tuple[str, ...]  # those nodes, sorted
    first: float  # the earliest onset counted (Unix time)
    last: float  # the latest onset counted

    @property
    def where(self) -> str:
        """``the fleet`` or ``topology.kubernetes.io/zone=us-east-1a``."""
        return "the fleet" if self.group == FLEET else self.group

    @property
    def why(self) -> str:
        """``memcg-leak's condition began to hold (pending or firing) on 7 of 12 nodes in
        topology.kubernetes.io/zone=a within 10m (58%, above the bound of 30%)``."""
        return words(self.holding, self.nodes, self.where, self.rule, self.window,
                     self.bound)


def percents(share: float, bound: float) -> tuple[str, str]:
    """``share`` and ``bound`` (fractions, ``share > bound``) as percentages that read
    as what they are: the share gets as many decimals as it takes to be visibly above
    the bound as shown (76 of 250 with a bound of 0.3 is ``30.4%``, never ``30%``)."""
    shown_bound = f"{bound * 100:g}"
    for digits in range(7):
        shown = f"{share * 100:.{digits}f}"
        if float(shown) > float(shown_bound) or share <= bound:
            break
    return f"{shown}%", f"{shown_bound}%"


def words(holding: int, nodes: int, where: str, rule: str, window: float,
          bound: float) -> str:
    """What a trip says (:attr:`Trip.why`; a latch's record read back says the same):
    the nodes on which the rule's condition began to hold, pending included (the breaker
    counts a node before its ``for`` runs out, so "fired" would be untrue)."""
    share, limit = percents(holding / nodes if nodes else 0.0, bound)
    return (f"{rule}'s condition began to hold (pending or firing) on {holding} of "
            f"{nodes} nodes in {where} within {format_duration(window)} ({share}, above "
            f"the bound of {limit})")


def groups_of(labels: Mapping[str, str], by: Iterable[str]) -> list[str]:
    """The groups a node with ``labels`` belongs to: ``fleet``, then ``key=value`` for
    each key of ``by`` (``key=`` where the node has no such label)."""
    return [FLEET, *(f"{k}={labels.get(k, '')}" for k in by)]


def judge(nodes: Iterable[NodeFiring], now: float, params: BreakerParams) -> list[Trip]:
    """The (rule, group) pairs that trip at ``now`` (see the module's contract)."""
    size: dict[str, int] = {}
    onsets: dict[tuple[str, str], dict[str, float]] = {}
    for node in nodes:
        groups = groups_of(node.labels, params.by)
        for g in groups:
            size[g] = size.get(g, 0) + 1
        for rule, since in node.firing.items():
            since = min(since, now)
            if since < now - params.window:
                continue
            for g in groups:
                onsets.setdefault((rule, g), {})[node.name] = since
    out: list[Trip] = []
    for (rule, g), began in onsets.items():
        share = len(began) / size[g]
        if len(began) >= params.min_nodes and share > params.share:
            out.append(Trip(rule, g, len(began), size[g], share, params.share,
                            params.window, tuple(sorted(began)), min(began.values()),
                            max(began.values())))
    out.sort(key=lambda t: (t.rule, t.group != FLEET, t.group))
    return out
