"""Carry out decisions: plan each action, audit the plan, apply it unless dry-run, audit
the outcome. Dry-run is this same path with the apply step left out."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .audit import AuditLog
from .engine import Decision
from .host import Host
from .plugins import ActionContext, Outcome, Plan
from .policy.loader import Ruleset
from .snapshot import Snapshot

log = logging.getLogger("guardian.executor")


class FleetGate(Protocol):
    """A fleet-wide budget (see guardian.kube.fleet.FleetBudget)."""

    def acquire(self) -> tuple[str | None, str]: ...

    def release(self, slot: str) -> None: ...


@dataclass
class Executed:
    """One action of one decision: its plan and, when live, its outcome."""

    decision: Decision
    use: str
    plan: Plan | None
    outcome: Outcome | None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.decision.rule, "use": self.use,
            "plan": self.plan.to_dict() if self.plan else None,
            "outcome": self.outcome.to_dict() if self.outcome else None,
            "error": self.error,
        }


@dataclass
class Executor:
    """Runs the actions of decisions against one host."""

    host: Host
    dry_run: bool = True
    audit: AuditLog | None = None
    clock: Callable[[], float] = time.time
    on_result: list[Callable[[Executed], None]] = field(default_factory=list)
    apply_timeout: float = 300.0
    heartbeat: Callable[[], None] = lambda: None  # called while an apply runs
    fleet: FleetGate | None = None

    def record(self, record: dict[str, Any]) -> None:
        if self.audit is not None:
            self.audit.write({"ts": self.clock(), **record})

    def run(self, ruleset: Ruleset, decisions: list[Decision],
            snapshot: Snapshot) -> list[Executed]:
        results: list[Executed] = []
        for d in decisions:
            self.record({"type": "decision", **d.to_dict()})
            rule = ruleset.by_name(d.rule)
            if rule is None or not d.actions:
                continue
            ctx = ActionContext(d.rule, snapshot, self.host, self.dry_run, values=d.values,
                                kind=d.kind)
            slot = None
            if rule.spec.fleet and not self.dry_run and d.kind != "resolved":
                slot, why = self.fleet.acquire() if self.fleet else (
                    None, "the rule needs the fleet budget, and [fleet] is not configured")
                if slot is None:
                    self.record({"type": "fleet_refused", "rule": d.rule, "reason": why})
                    log.warning("rule %s: not acting: %s", d.rule, why)
                    results.append(self._done(Executed(d, "(fleet budget)", None, None, why)))
                    continue
            try:
                for bound in rule.actions:
                    if any(bound.spec is a for a in d.actions):
                        results.append(self.execute(d, bound.spec.use, bound.action, ctx))
            finally:
                if slot is not None and self.fleet is not None:
                    self.fleet.release(slot)
        return results

    def execute(self, d: Decision, use: str, action: Any, ctx: ActionContext) -> Executed:
        """Plan one action, audit the plan, apply it unless dry-run, audit the outcome."""
        try:
            plan = action.plan(ctx)
        except Exception as exc:
            ex = Executed(d, use, None, None, error=f"plan failed: {exc!r}")
            self.record({"type": "error", "dry_run": self.dry_run, **ex.to_dict()})
            log.error("rule %s: action %s: plan failed: %r", d.rule, use, exc)
            return self._done(ex)
        self.record({"type": "plan", "dry_run": self.dry_run, "rule": d.rule, "use": use,
                     "plan": plan.to_dict()})
        if self.dry_run:
            return self._done(Executed(d, use, plan, None))
        started = time.monotonic()
        outcome = self._apply(action, plan, ctx)
        outcome.data.setdefault("seconds", round(time.monotonic() - started, 6))
        self.record({"type": "outcome", "rule": d.rule, "use": use,
                     "outcome": outcome.to_dict()})
        if not outcome.ok:
            log.error("rule %s: action %s failed: %s", d.rule, use, outcome.error)
        return self._done(Executed(d, use, plan, outcome))

    def _apply(self, action: Any, plan: Plan, ctx: ActionContext) -> Outcome:
        """Run apply in a worker thread, so a stuck action costs the loop at most
        ``apply_timeout`` and the loop keeps its heartbeat (the systemd watchdog) meanwhile.
        A Python thread cannot be killed: one that overruns is reported and left to end."""
        box: list[Outcome] = []

        def work() -> None:
            try:
                box.append(action.apply(plan, ctx))
            except Exception as exc:
                box.append(Outcome(ok=False, error=f"apply raised {exc!r}"))

        worker = threading.Thread(target=work, name=f"guardian-apply-{plan.action}",
                                  daemon=True)
        worker.start()
        deadline = time.monotonic() + self.apply_timeout
        while worker.is_alive() and time.monotonic() < deadline:
            worker.join(min(0.5, max(deadline - time.monotonic(), 0.0)))
            self.heartbeat()
        if box:
            return box[0]
        return Outcome(ok=False, error=f"apply did not finish within "
                                       f"{self.apply_timeout:g}s (left running)")

    def _done(self, ex: Executed) -> Executed:
        for cb in self.on_result:
            cb(ex)
        return ex
