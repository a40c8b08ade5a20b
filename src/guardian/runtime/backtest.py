"""The fleet backtest: a rule set run over many nodes' recordings at once, on one clock.

Each node's recording goes through the real engine (:func:`guardian.runtime.replay.step`,
the replay's own step, one engine per node, the rules compiled once), the holds of the
backtest's directory and the config's maintenance window judged at the node's own wall
time (its recording's start plus the snapshot's time). All nodes' snapshots are taken in
the order of one clock: by default every recording starts at its +0s (``align="start"``:
recordings made at different times overlap, the worst case for the budget), or as they
were made (``align="wall"``: a fleet recorded together replays as it happened). Ties go
in the order of the nodes' names.

What the engine decides on a node is carried out as the executor would, without
touching any host: a ``fleet = true`` rule's disruptive actions need a slot of the fleet
budget (``[fleet]``: the counting rules of :mod:`guardian.model.budget`, over slots held
and nodes cordoned or carrying guardian's condition, every node Ready; a node of a
``[[group]]`` with a budget of its own is admitted by that one too, counted among the
group's nodes, as :class:`guardian.kube.fleet.FleetBudget` does), a slot is given back
when every rule that took it has resolved.

Where ``[fleet.breaker]`` is configured, the breaker is simulated as it runs on a cluster
(:mod:`guardian.kube.breaker`): each node tells it the ``fleet = true`` rules whose
condition holds on it (pending or firing) since it first saw each; after an evaluation in
which such a rule began within the breaker's window, a node judges the fleet
(:func:`guardian.model.breaker.judge`, at most every ``every``) with what every node told
it then; a (rule, group) that trips is latched (only a human releases it) and is a
latched hold of that rule (its disruptive actions wait) on every node of the group from
that node's next evaluation on.

Node groups (``[[group]]``, :mod:`guardian.model.nodegroups`) are judged with each node's
labels as the executor judges them: a decision of a shadow group, or of a rule its group
does not list, runs in shadow.

A node counts as disrupted from the first disruptive action it runs until every rule
that ran one has resolved (and while it holds a slot or a mark); a node whose recording
ends then stays as it was (nothing recorded says it resolved).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from guardian.core.snapshot import SignalSpec
from guardian.engine.bounds import Budget
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine
from guardian.model import budget
from guardian.model.breaker import BreakerParams, NodeFiring, Trip, groups_of, judge
from guardian.model.budget import Limits
from guardian.model.holds import Hold
from guardian.model.nodegroups import NodeGroup, shadow_why
from guardian.model.ruleset import BoundAction, Ruleset
from guardian.model.window import Window
from guardian.runtime.fleetdir import Fleet, FleetNode
from guardian.runtime.replay import Replay, step
from guardian.runtime.status import at

Align = Literal["start", "wall"]
ALIGNS: tuple[Align, ...] = ("start", "wall")

#: actions that leave a mark on the node object that the fleet budget counts as
#: disrupted: cordoned (kube.cordon; kube.drain cordons first)
CORDONS = frozenset({"kube.cordon", "kube.drain"})
UNCORDON = "kube.uncordon"
CONDITION = "kube.condition"


@dataclass(frozen=True)
class BudgetParams:
    """The fleet budget's settings (``[fleet]``'s ``max_nodes``, ``max_percent``,
    ``min_healthy``, ``condition_types``)."""

    max_nodes: int | None = 1
    max_percent: float | None = None
    min_healthy: str = "0"
    condition_types: tuple[str, ...] = ("GuardianProblem",)

    @classmethod
    def of(cls, fleet: Any) -> BudgetParams:
        """From the config's ``[fleet]`` (a FleetParams)."""
        return cls(fleet.max_nodes, fleet.max_percent, fleet.min_healthy,
                   tuple(fleet.condition_types))

    @property
    def limits(self) -> Limits:
        """These settings as the budget's counting rules take them."""
        return Limits(self.max_nodes, self.max_percent, self.min_healthy)

    def describe(self, nodes: int) -> str:
        """``at most 1 node disrupted at once (max_nodes 1 of 4), min_healthy 0``."""
        return describe(self.limits, nodes)


def describe(limits: Limits, nodes: int) -> str:
    """A budget in words, over ``nodes``: ``at most 1 node disrupted at once (max_nodes 1
    of 4), min_healthy 0``."""
    limit = budget.slots(nodes, limits.max_nodes, limits.max_percent)
    how = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in
                    (("max_nodes", limits.max_nodes), ("max_percent", limits.max_percent))
                    if v is not None)
    return (f"at most {limit} node{'s' if limit != 1 else ''} disrupted at once "
            f"({how}{' ' if how else ''}of {nodes}), min_healthy {limits.min_healthy}")


@dataclass
class Event:
    """One decision on one node, and what became of its actions."""

    time: float  # on the backtest's clock
    node: str
    decision: Decision
    said: str  # what its condition compared then, as replay says it
    ran: list[str] = field(default_factory=list)  # actions that would run
    shadow: list[str] = field(default_factory=list)  # a shadow rule's: planned only
    held: list[str] = field(default_factory=list)  # held by a hold, a cause, a window
    refused: list[str] = field(default_factory=list)  # refused by the fleet budget
    why: str = ""  # the budget's reason
    breaker: bool = False  # held by a latch of the breaker

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {"time": round(self.time, 3), "node": self.node, "rule": d.rule,
                "kind": d.kind, "mode": d.mode, "step": d.step, "reason": d.reason,
                "compared": self.said, "ran": self.ran, "shadow": self.shadow,
                "held": self.held, "refused": self.refused, "why": self.why,
                "breaker": self.breaker}


@dataclass
class Caught:
    """A problem a recording names: caught by ``rule`` at ``time``, missed, or not judged
    (its rule had no value on the node in any snapshot, or the rule set has none of its
    name: nothing says whether it would have fired)."""

    problem: str
    rule: str = ""  # the rule whose firing caught it ("" not caught)
    time: float | None = None  # when it first fired, on the backtest's clock
    how: str = ""  # "" (the problem's own rule) or "its cause"
    known: bool = True  # whether the rule set has a rule of the problem's name
    blind: int = 0  # snapshots in which the problem's rule had no value on the node
    snapshots: int = 0  # the node's snapshots evaluated

    @property
    def caught(self) -> bool:
        return bool(self.rule)

    @property
    def judged(self) -> bool:
        """Caught, or missed by a rule that had a value on the node at some time."""
        return self.caught or (self.known and self.blind < self.snapshots)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem, "caught": self.caught, "rule": self.rule or None,
                "time": None if self.time is None else round(self.time, 3),
                "how": self.how or None, "known": self.known, "judged": self.judged,
                "blind": self.blind}


@dataclass
class NodeResult:
    """One node's part of a backtest."""

    node: FleetNode
    offset: float  # where its recording's +0s is on the backtest's clock
    replay: Replay
    caught: list[Caught] = field(default_factory=list)
    fired: dict[str, float] = field(default_factory=dict)  # rule -> first firing (clock)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def end(self) -> float:
        snaps = self.node.recording.snapshots
        return self.offset + (snaps[-1].time if snaps else 0.0)


@dataclass
class Backtest:
    """What a rule set would have done over a fleet's recordings."""

    nodes: list[NodeResult]
    align: Align
    events: list[Event] = field(default_factory=list)
    # how many nodes were disrupted at once, each time it changed: (time, nodes)
    disrupted: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    trips: list[tuple[float, Trip]] = field(default_factory=list)  # as each latched
    budget: BudgetParams | None = None
    breaker: BreakerParams | None = None
    groups: list[NodeGroup] = field(default_factory=list)
    rule_names: list[str] = field(default_factory=list)  # the rule set's

    def group_budgets(self) -> list[tuple[NodeGroup, Limits, int]]:
        """Each node group with a budget of its own, that budget, and how many of the
        backtest's nodes are in the group."""
        labels: dict[str, dict[str, str] | None] = {
            r.name: r.node.labels for r in self.nodes}
        return [(g, own, len(budget.members(g, labels, self.groups)))
                for g in self.groups if (own := Limits.of(g)) is not None]

    @property
    def peak(self) -> tuple[int, float | None, tuple[str, ...]]:
        """The most nodes disrupted at once, when it was first reached and which."""
        best: tuple[int, float | None, tuple[str, ...]] = (0, None, ())
        for t, names in self.disrupted:
            if len(names) > best[0]:
                best = (len(names), t, names)
        return best

    @property
    def end(self) -> float:
        return max((n.end for n in self.nodes), default=0.0)

    def missed(self) -> list[tuple[str, Caught]]:
        """(node, problem) of every named problem its rule, having a value on the node
        at some time, did not catch (nor a cause it names)."""
        return [(n.name, c) for n in self.nodes for c in n.caught if c.judged and not c.caught]

    def not_judged(self) -> list[tuple[str, Caught]]:
        """(node, problem) of every named problem not caught whose rule had no value on
        the node the whole time (or that names no rule of the set)."""
        return [(n.name, c) for n in self.nodes for c in n.caught if not c.judged]

    def blind(self) -> dict[str, tuple[list[str], list[tuple[str, int, int]]]]:
        """Each rule that had no value on some node: the nodes where it had none the
        whole time, and (node, snapshots without one, of how many) where part of it."""
        out: dict[str, tuple[list[str], list[tuple[str, int, int]]]] = {}
        for n in self.nodes:
            ticks = n.replay.ticks
            for rule, k in sorted(n.replay.blind.items()):
                whole, part = out.setdefault(rule, ([], []))
                if k >= ticks:
                    whole.append(n.name)
                elif k > 0:
                    part.append((n.name, k, ticks))
        return dict(sorted(out.items()))

    def blind_everywhere(self) -> list[str]:
        """The rules that had no value on any node in any snapshot: the backtest judged
        nothing of them (they could neither fire nor be missed)."""
        everyone = len(self.nodes)
        return [rule for rule, (whole, _) in self.blind().items()
                if everyone and len(whole) == everyone]

    def false_positives(self) -> list[tuple[str, str, float]]:
        """(node, rule, first firing) of every rule that fired on a node whose
        recording names no problem."""
        return [(n.name, rule, t) for n in self.nodes if not n.node.problems
                for rule, t in sorted(n.fired.items(), key=lambda x: (x[1], x[0]))]


class _Budget:
    """The fleet budget over simulated nodes: slots held (by rule) and marks."""

    def __init__(self, params: BudgetParams | None, labels: dict[str, dict[str, str]],
                 groups: list[NodeGroup]) -> None:
        self.p = params
        self.labels: dict[str, dict[str, str] | None] = dict(labels)
        self.groups = groups
        self.slots: dict[str, set[str]] = {}  # node -> rules that hold its slot
        self.cordons: dict[str, set[str]] = {}  # node -> rules that claim its cordon
        self.conditions: dict[str, set[str]] = {}  # node -> rules that set a condition

    def counted(self) -> set[str]:
        """The nodes the budget counts as disrupted."""
        return {n for held in (self.slots, self.cordons, self.conditions)
                for n, rules in held.items() if rules}

    def hold(self, node: str, rule: str) -> str:
        """Take (or keep) ``node``'s slot for ``rule``: "" or why not."""
        if self.p is None:
            return "the rule needs the fleet budget, and [fleet] is not configured"
        if node not in self.slots:  # every node Ready: a recording says nothing else
            why = budget.admit(node, self.labels, set(self.labels), self.counted(),
                               self.p.limits, self.groups)
            if why:
                return f"fleet budget: {why}"
        self.slots.setdefault(node, set()).add(rule)
        return ""

    def done(self, node: str, rule: str) -> None:
        """``rule`` resolved on ``node``: the last such rule gives the slot back."""
        rules = self.slots.get(node)
        if rules is not None:
            rules.discard(rule)
            if not rules:
                del self.slots[node]

    def marked(self, node: str, rule: str, kind: str, ran: list[BoundAction]) -> None:
        """Marks the actions that ran leave on the node: a cordon claimed for ``rule``
        until its clean-up (or a kube.uncordon) releases it, guardian's condition
        while the rule fires."""
        for a in ran:
            if a.use in CORDONS:
                claims = self.cordons.setdefault(node, set())
                claims.discard(rule) if kind == "resolved" else claims.add(rule)
            elif a.use == UNCORDON:
                self.cordons.setdefault(node, set()).discard(rule)
            elif a.use == CONDITION and self.p is not None and \
                    a.params.get("type", "GuardianProblem") in self.p.condition_types:
                marks = self.conditions.setdefault(node, set())
                marks.discard(rule) if kind == "resolved" else marks.add(rule)


def backtest(fleet: Fleet, ruleset: Ruleset, *, align: Align = "start",
             engine_budget: Budget | None = None, window: Window | None = None,
             fleet_budget: BudgetParams | None = None,
             breaker: BreakerParams | None = None,
             groups: list[NodeGroup] | None = None) -> Backtest:
    """Run ``ruleset`` over every node of ``fleet`` on one clock (see the module)."""
    first = min((n.started for n in fleet.nodes), default=0.0)
    results = [NodeResult(n, n.started - first if align == "wall" else 0.0,
                          Replay(Engine(ruleset, engine_budget))) for n in fleet.nodes]
    bt = Backtest(results, align, budget=fleet_budget, breaker=breaker,
                  groups=list(groups or []), rule_names=[r.name for r in ruleset.rules])
    specs: list[dict[str, SignalSpec]] = [{**n.recording.catalogue, **ruleset.signals}
                                          for n in fleet.nodes]
    gate = _Budget(fleet_budget, {n.name: n.labels for n in fleet.nodes}, groups or [])
    acting: dict[str, set[str]] = {}  # node -> rules that ran a disruptive action
    breakers = _Breaker(breaker, ruleset, fleet) if breaker is not None else None
    queue = [(r.offset + s.time, i, k) for i, r in enumerate(results)
             for k, s in enumerate(r.node.recording.snapshots)]
    heapq.heapify(queue)
    now_disrupted: tuple[str, ...] = ()
    while queue:
        t, i, k = heapq.heappop(queue)
        res = results[i]
        node = res.node
        snap = node.recording.snapshots[k]
        before = len(res.replay.decisions)
        latches = breakers.holds(node) if breakers is not None else []
        decisions = step(res.replay, snap, specs[i], holds=[*fleet.holds, *latches],
                         wall=node.started + snap.time, window=window)
        for d in decisions:
            if d.kind == "firing":
                res.fired.setdefault(d.rule, t)
        if breakers is not None:
            bt.trips += [(t, trip) for trip in breakers.after(node, res.replay.engine, t)]
        for j, d in enumerate(decisions):
            if groups and d.mode != "observe" and d.actions:
                why = shadow_why(d.rule, any(a.disruptive for a in d.actions), node.labels,
                                 groups)
                if why:  # its node group: planned only, as the executor does
                    d.mode = "observe"
                    d.reason = f"{d.reason}; {why}" if d.reason else why
            ev = _carry_out(d, t, node, res.replay.said.get(before + j, d.text), gate)
            ev.breaker = bool(d.would) and any(
                h.rule == d.rule and h.reason in d.reason for h in latches)
            bt.events.append(ev)
            mine = acting.setdefault(node.name, set())
            if d.kind == "resolved" and d.mode != "observe":
                mine.discard(d.rule)
                if d.fleet:
                    gate.done(node.name, d.rule)
            elif any(_disruptive(d, use) for use in ev.ran):
                mine.add(d.rule)
        disrupted = tuple(sorted({n for n, rules in acting.items() if rules}
                                 | gate.counted()))
        if disrupted != now_disrupted:
            bt.disrupted.append((t, disrupted))
            now_disrupted = disrupted
    for res in results:
        res.caught = [_caught(p, res, ruleset) for p in res.node.problems]
    return bt


def _disruptive(d: Decision, use: str) -> bool:
    return any(a.use == use and a.disruptive for a in d.actions)


class _Breaker:
    """The breaker over simulated nodes, as :mod:`guardian.kube.breaker` runs it."""

    AUTHOR = "guardian breaker"

    def __init__(self, params: BreakerParams, ruleset: Ruleset, fleet: Fleet) -> None:
        self.p = params
        self.fleet_rules = {r.name for r in ruleset.rules if r.spec.fleet}
        self.nodes = fleet.nodes
        self.onsets: dict[str, dict[str, float]] = {n.name: {} for n in fleet.nodes}
        self.judged: dict[str, float] = {}  # node -> when it last judged
        # (rule, group) -> when it tripped, the node that latched it, the trip
        self.latched: dict[tuple[str, str], tuple[float, str, Trip]] = {}

    def holds(self, node: FleetNode) -> list[Hold]:
        """The latches that hold rules on ``node``, as :mod:`guardian.kube.breaker`
        makes them: latched holds, never expiring."""
        groups = set(groups_of(node.labels, self.p.by))
        return [Hold(math.inf, f"breaker tripped at {at(t)} (node {by}): {trip.why}; "
                     f"until a human releases it", self.AUTHOR, trip.rule, (),
                     f"breaker {trip.group}", latched=True)
                for (_, g), (t, by, trip) in sorted(self.latched.items()) if g in groups]

    def after(self, node: FleetNode, engine: Engine, t: float) -> list[Trip]:
        """``node`` evaluated at ``t``: what it tells the breaker, and the trips it
        latches when it judges."""
        was = self.onsets[node.name]
        now = {r: was.get(r, t) for r in sorted(self.fleet_rules)
               if r in engine.states and engine.states[r].phase in ("pending", "firing")}
        self.onsets[node.name] = now
        if not any(t - since <= self.p.window for since in now.values()) or \
                t - self.judged.get(node.name, -math.inf) < self.p.every:
            return []
        self.judged[node.name] = t
        out = []
        for trip in judge((NodeFiring(n.name, n.labels, self.onsets[n.name])
                           for n in self.nodes), t, self.p):
            if (trip.rule, trip.group) not in self.latched:
                self.latched[(trip.rule, trip.group)] = (t, node.name, trip)
                out.append(trip)
        return out


def _carry_out(d: Decision, t: float, node: FleetNode, said: str, gate: _Budget) -> Event:
    """What the executor would do with ``d`` on ``node`` (no host touched)."""
    ev = Event(t, node.name, d, said)
    if d.would:
        ev.held = [a.use for a in d.would]
        return ev
    if d.mode == "observe":
        ev.shadow = [a.use for a in d.actions]
        return ev
    acts = list(d.actions)
    if d.fleet and d.kind != "resolved" and any(a.disruptive for a in acts):
        ev.why = gate.hold(node.name, d.rule)
        if ev.why:
            ev.refused = [a.use for a in acts if a.disruptive]
            acts = [a for a in acts if not a.disruptive]
    ev.ran = [a.use for a in acts]
    gate.marked(node.name, d.rule, d.kind, acts)
    return ev


def _caught(problem: str, res: NodeResult, ruleset: Ruleset) -> Caught:
    """The problem caught by its own rule's firing, else by the earliest firing of one
    of the causes its rule names (``caused_by``: the chain one link up, never further,
    so that the root firing does not count every symptom caught), else not caught:
    missed, or not judged where its rule had no value on the node the whole time."""
    blind, ticks = res.replay.blind.get(problem, 0), res.replay.ticks
    if problem in res.fired:
        return Caught(problem, problem, res.fired[problem], blind=blind, snapshots=ticks)
    rule = ruleset.by_name(problem)
    if rule is None:
        return Caught(problem, known=False)
    found = sorted((res.fired[c], c) for c in rule.spec.caused_by if c in res.fired)
    if not found:
        return Caught(problem, blind=blind, snapshots=ticks)
    t, cause = found[0]
    return Caught(problem, cause, t, "its cause", blind=blind, snapshots=ticks)


def timeline_rows(bt: Backtest, hide: Iterable[str] = ()) -> list[list[str]]:
    """The backtest's events as table rows (time, node, rule, decision, what), but for
    the decisions of the kinds in ``hide``."""
    hidden = set(hide)
    return [[at(ev.time), ev.node, ev.decision.rule, ev.decision.kind, what(ev)]
            for ev in bt.events if ev.decision.kind not in hidden]


def what(ev: Event) -> str:
    """What became of an event's actions, and why, in words: ``runs log, systemd.unit;
    fleet budget refused memcg.release: 1 other node(s) already disrupted (a) …``."""
    d = ev.decision
    parts = []
    if ev.ran:
        parts.append(f"runs {', '.join(ev.ran)}")
    if ev.shadow:
        parts.append(f"shadow mode, would run {', '.join(ev.shadow)}")
    if ev.held and not d.reason:  # the engine's reason says what it holds, and why
        parts.append(f"holds {', '.join(ev.held)}")
    if ev.refused:
        parts.append(f"refused {', '.join(ev.refused)} ({ev.why})")
    if d.reason:
        parts.append(d.reason)
    return "; ".join(parts)
