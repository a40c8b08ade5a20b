"""The service's per-tick link to what operators set: the holds in force from every
source, the approvals given and the default maintenance window, with the wall time they
are judged at, are
read into an :class:`~guardian.engine.engine.Operating` that each evaluation takes as an
argument; the metrics show the holds, the paused and shadow rules, and the rules that
need a human."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from guardian.engine import gate
from guardian.engine.decision import Decision
from guardian.engine.engine import Engine, Operating
from guardian.model.approvals import Approval
from guardian.model.holds import Hold, in_force
from guardian.model.nodegroups import shadow_why
from guardian.runtime.approvals import ApprovalFile
from guardian.runtime.config import Config
from guardian.runtime.holds import DropIn, HoldFile, HoldReader
from guardian.runtime.metrics import Metrics

if TYPE_CHECKING:
    from guardian.runtime.executor import Executor

log = logging.getLogger("guardian.holds")


def holds_path(config: Config, state_path: Path | None) -> Path | None:
    """`guardian pause`'s file: the config's, else holds.json beside the state file."""
    if config.holds.file:
        return Path(config.holds.file)
    return state_path.parent / "holds.json" if state_path is not None else None


def approvals_path(config: Config, state_path: Path | None) -> Path | None:
    """`guardian approve`'s file: approvals.json beside `guardian pause`'s."""
    path = holds_path(config, state_path)
    return path.parent / "approvals.json" if path is not None else None


def readers(config: Config, state_path: Path | None) -> list[HoldReader]:
    """Every source of holds the config names. ``[holds.kube]`` and ``[fleet.breaker]``
    on the same node and credentials are one reader (one GET of the node a tick)."""
    out: list[HoldReader] = []
    path = holds_path(config, state_path)
    if path is not None:
        out.append(HoldFile(path))
    if config.holds.dropin:
        out.append(DropIn(Path(config.holds.dropin)))
    kube, fleet = config.holds.kube, config.fleet
    if fleet is not None and getattr(fleet, "breaker", None) is None:
        fleet = None
    if kube is not None:
        from guardian.kube.holds import KubeHolds, KubeHoldsParams
        assert isinstance(kube, KubeHoldsParams)
    if fleet is not None:
        from guardian.kube.breaker import KubeBreaker, shares_reads
        from guardian.kube.fleet import FleetParams
        assert isinstance(fleet, FleetParams)
        if kube is not None and shares_reads(kube, fleet):
            return [*out, KubeBreaker(fleet, holds=kube)]
    if kube is not None:
        out.append(KubeHolds(kube))
    if fleet is not None:
        out.append(KubeBreaker(fleet))
    return out


def holding(engine: Engine) -> list[str]:
    """The ``fleet = true`` rules whose condition holds now (pending or firing): what
    this node tells the correlated-failure breaker (guardian.kube.breaker)."""
    return sorted(r.name for r in engine.ruleset.rules if r.spec.fleet
                  and r.name in engine.states
                  and engine.states[r.name].phase in ("pending", "firing"))


class Operations:
    """Call :meth:`before` ahead of each evaluation (it says what to evaluate under) and
    :meth:`after` once it is committed."""

    def __init__(self, config: Config, state_path: Path | None,
                 sources: list[HoldReader] | None = None) -> None:
        self.window = config.engine.window
        self.sources = readers(config, state_path) if sources is None else sources
        self.seen: set[Hold] = set()
        self.groups = list(config.groups)
        self.static_labels = config.node.labels
        path = approvals_path(config, state_path)
        self.approvers: list[object] = [ApprovalFile(path)] if path is not None else []

    def labels(self) -> dict[str, str] | None:
        """This node's labels: ``[node] labels``, else as a Kubernetes reader last read
        them from its Node object; None when not read yet, or when nothing reads them."""
        if self.static_labels is not None:
            return dict(self.static_labels)
        kube = [src for src in self.sources if hasattr(src, "labels")]
        found = [getattr(src, "labels", None) for src in kube]
        return next((dict(x) for x in found if x is not None), None)

    def shadow(self, d: Decision) -> str:
        """Why ``d`` runs in shadow on this node's node group ("" when it acts): the
        executor's ``shadow``."""
        return shadow_why(d.rule, any(a.disruptive for a in d.actions), self.labels(),
                          self.groups)

    def govern(self, executor: Executor) -> None:
        """Hold ``executor`` to this node's node group (its ``shadow``, judged at each
        run): on a shadow group's node, or for a rule its group does not list, a
        decision is planned and audited, never applied. The one place the service and
        ``run --once`` (:func:`guardian.runtime.once.operating`) wire node groups."""
        if self.groups:
            executor.shadow = self.shadow

    def holds(self, wall: float) -> list[Hold]:
        out: list[Hold] = []
        for src in self.sources:
            try:
                out.extend(src.read())
            except Exception as exc:  # a source's bug must not stop the loop
                log.error("holds: %s failed: %r", type(src).__name__, exc)
        return in_force(out, wall)

    def before(self, wall: float | None = None) -> Operating:
        """The holds in force at ``wall`` (now when None), judged at it, and the default
        window; a hold that starts or ends is logged once."""
        wall = time.time() if wall is None else wall
        held = self.holds(wall)
        for h in sorted(set(held) - self.seen, key=lambda h: h.until):
            log.warning("hold from %s on rules %s: %s", h.source, h.matcher, h.describe())
        for h in sorted(self.seen - set(held), key=lambda h: h.until):
            log.info("hold from %s on rules %s ended", h.source, h.matcher)
        self.seen = set(held)
        return Operating(tuple(held), wall, self.window, tuple(self.approvals()))

    def approvals(self) -> list[Approval]:
        """The approvals given: `guardian approve`'s file and the sources of holds that
        read them too (the node annotation guardian.io/approve)."""
        out: list[Approval] = []
        for src in [*self.approvers, *self.sources]:
            read = getattr(src, "approvals", None)
            if not callable(read):
                continue
            try:
                out.extend(read())
            except Exception as exc:  # a source's bug must not stop the loop
                log.error("approvals: %s failed: %r", type(src).__name__, exc)
        return out

    def after(self, engine: Engine, metrics: Metrics) -> None:
        ops = metrics.operations
        ops.holds = list(engine.operating.holds)
        ops.paused = {n: bool(st.paused) for n, st in engine.states.items()}
        ops.needs_human = {n: st.escalated for n, st in engine.states.items()}
        ops.validating = {n: st.validating is not None for n, st in engine.states.items()}
        ops.awaiting = {n: gate.awaits(st) for n, st in engine.states.items()}
        ops.demoted = {n: bool(st.demoted) for n, st in engine.states.items()}
        ops.observe = {r.name: r.observe for r in engine.ruleset.rules}

    def tell(self, engine: Engine) -> None:
        """Once an evaluation is committed: tell the breaker's reader
        (guardian.kube.breaker) which fleet rules hold on this node now."""
        for src in self.sources:
            firing = getattr(src, "firing", None)
            if callable(firing):
                firing(holding(engine))
