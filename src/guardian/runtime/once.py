"""One pass of the service's loop, on demand: collect, evaluate and carry out the
engine's decisions once, with the state and the holds the service would use.

``guardian run --once`` is this (a cron job, a script, an agent that embeds guardian can
call it too); between passes the state file carries ``for``, cooldowns, limits and the
budget, as the service carries them from tick to tick::

    engine = once.engine_for(rules, config, paths.state, paths.state)
    report = once.run_once(rules, collector, engine, executor, warmup=1.0,
                           state_path=paths.state,
                           operating=once.operating(config, paths.state, executor))
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from guardian.core.snapshot import Snapshot
from guardian.engine import outcomes
from guardian.engine.bounds import Budget
from guardian.engine.decision import Decision, decision_values, render_values, signal_units
from guardian.engine.engine import Engine, Operating, next_step
from guardian.model.ruleset import BoundAction, CompiledRule, Ruleset
from guardian.model.schema import Severity
from guardian.plugin.registry import default_registry
from guardian.runtime import coverage
from guardian.runtime import state as state_file
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.executor import Executed, Executor

__all__ = ["Pass", "RuleReport", "engine_for", "operating", "run_once", "warm_snapshot"]

Condition = Literal["holds", "ok", "unknown", "disabled"]


def warm_snapshot(coll: Collector, warmup: float, engine: Engine | None = None) -> Snapshot:
    """A snapshot taken ``warmup`` seconds after a first one, so per-core percentages and
    rates have values; the first feeds the engine's history (never its decisions) when
    one is given."""
    first = coll.collect(time.monotonic())
    if engine is not None:
        engine.observe(first)
    time.sleep(warmup)
    return coll.collect(time.monotonic())


def engine_for(rules: Ruleset, config: Config, state_path: Path | None,
               holds_state: Path) -> Engine:
    """An engine for one pass: the config's budget and the state the last pass saved in
    ``state_path`` (none for a dry run, which neither reads nor writes it). The holds and
    maintenance window the pass is evaluated under are :func:`operating`'s (an argument
    of each evaluation, not the engine's); ``holds_state`` is kept for callers."""
    budget = config.engine.budget
    engine = Engine(rules, Budget(budget.runs, budget.within), boot=state_file.SYSTEM.boot())
    if state_path is not None:
        state_file.load(engine, state_path)
    return engine


def operating(config: Config, holds_state: Path, executor: Executor) -> Operating:
    """The holds in force now and the maintenance window, as the service sees them
    (guardian pause's holds beside ``holds_state``), for :func:`run_once`; ``executor``
    is held to this node's node group (``[[group]]``) as the service's is
    (:meth:`~guardian.runtime.operate.Operations.govern`): a shadow group's node plans
    and audits its decisions, never applies them."""
    from guardian.runtime.operate import Operations  # the holds, as the service reads them

    ops = Operations(config, holds_state)
    ops.govern(executor)
    return ops.before()


@dataclass
class RuleReport:
    """One rule after the pass: its condition, phase, evidence and what it ran or would
    run (``plans``: :meth:`Executed.to_dict` of each, with its ``result``: ``ok``,
    ``failed``, ``planned`` (a dry run), ``held``..., or ``preview``: a dry run's plan
    of a rule the engine does not act on now); ``blind``: why an unknown rule has no
    value (the source unavailable or failing that gives its missing signal)."""

    rule: str
    severity: Severity
    condition: Condition
    phase: str
    values: dict[str, Any]
    missing: list[str]
    decisions: list[str]
    actions: list[dict[str, Any]]
    plans: list[dict[str, Any]]
    blind: str = ""

    @property
    def acted(self) -> bool:
        """Whether any of its plans was carried out (has an outcome)."""
        return any(p.get("outcome") for p in self.plans)

    @property
    def results(self) -> list[str]:
        """The result of each action the engine's decisions ran or planned (previews
        left out)."""
        return [p["result"] for p in self.plans if p.get("result") != "preview"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Pass:
    """What one pass saw, decided and did."""

    snapshot: Snapshot
    decisions: list[Decision]
    executed: list[Executed]
    rules: list[RuleReport]


def run_once(rules: Ruleset, coll: Collector, engine: Engine, executor: Executor, *,
             warmup: float, state_path: Path | None,
             operating: Operating | None = None) -> Pass:
    """Evaluate once and carry out the engine's decisions (planned only when the executor
    is a dry run). The state is saved to ``state_path`` before acting, as the service
    saves it. In a dry run, a rule whose condition holds but that the engine does not act
    on yet (pending, cooldown) also gets the plan it would run, from an executor that
    cannot apply."""
    snap = warm_snapshot(coll, warmup, engine)
    op = operating or Operating()
    decisions = engine.evaluate(snap, holds=op.holds, wall=op.wall, window=op.window,
                                approvals=op.approvals)
    if state_path is not None:
        state_file.save(engine, state_path)
    executed = executor.run(decisions, snap)
    preview = Executor(coll.host, dry_run=True)
    report = []
    blind = {b.rule: b for b in coverage.blind_rules(
        rules, engine.states, snap, coverage.sight_of(coll, default_registry()))}
    for rule in rules.rules:
        result = rule.condition.fn(snap.values, engine.history)
        condition: Condition = "unknown" if result is None else ("holds" if result else "ok")
        evidence = decision_values(rule, snap.values, result)
        entry = RuleReport(
            rule=rule.name, severity=rule.spec.severity,
            condition="disabled" if not rule.spec.enabled else condition,
            phase=engine.states[rule.name].phase, values=render_values(evidence),
            missing=[ref.key for ref in rule.condition.refs if ref.value(snap.values) is None],
            decisions=[d.kind for d in decisions if d.rule == rule.name],
            actions=[{"use": a.use, **a.public_params} for a in rule.actions],
            plans=[{**ex.to_dict(), "result": ex.result} for ex in executed
                   if ex.decision.rule == rule.name])
        if entry.condition == "unknown":
            seen = blind.get(rule.name)
            entry.blind = "; ".join(seen.reasons) if seen and seen.reasons else (
                f"no value for {', '.join(entry.missing)}" if entry.missing else
                "no value for a computed value (a rate needs two samples)")
        if rule.spec.enabled and result and not entry.plans and executor.dry_run:
            d = Decision(snap.time, rule.name, "would-fire", rule.spec.severity,
                         rule.spec.summary, evidence, _would_run(engine, rule, snap.time),
                         units=signal_units(rule, rules.signals))  # as the engine's
            entry.plans = [{**ex.to_dict(), "result": "preview"}
                           for ex in preview.run([d], snap)]
        report.append(entry)
    return Pass(snap, decisions, executed, report)


def _would_run(engine: Engine, rule: CompiledRule, now: float) -> list[BoundAction]:
    """What ``rule`` would run if it fired now: its fire actions, or the step of its
    ladder a climb would start at (a step's ``recurs`` counting this boot)."""
    if not rule.steps:
        return [a for a in rule.actions if a.spec.on != "resolve"]
    st = engine.states[rule.name].copy()
    outcomes.in_boot(st, engine.boot, now)
    i = next_step(rule, st, now) if not st.step else None
    return rule.steps[i].actions if i is not None else []
