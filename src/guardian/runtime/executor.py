"""Carry out decisions: plan each action, audit the plan, apply it unless dry-run, audit
the outcome. Dry-run is this same path with the apply step left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from guardian.core.audit import (
    AuditLog,
    AuditRecord,
    DecisionRecord,
    ErrorRecord,
    FleetRefusedRecord,
    LateOutcomeRecord,
    OutcomeRecord,
    PlanRecord,
    RefusedRecord,
)
from guardian.core.errors import in_words
from guardian.core.snapshot import Snapshot
from guardian.engine.decision import Decision
from guardian.hostio.host import Host
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan
from guardian.plugin.secrets import scrub_for
from guardian.runtime.deadline import DeadlineRunner, Ran

log = logging.getLogger("guardian.executor")

#: Any action, whatever its parameters and plan payload: the executor only hands an
#: action's own plan back to its ``apply``.
AnyAction = Action[Any, Any]


class FleetGate(Protocol):
    """A fleet-wide disruption budget (see guardian.kube.fleet.FleetBudget): a node holds
    a slot from its first disruptive action until every rule that took it has resolved."""

    def hold(self, rule: str) -> tuple[str | None, str]: ...

    def done(self, rule: str) -> None: ...

    def renew(self) -> None: ...


@dataclass
class Executed:
    """One action of one decision: its plan and, when live, its outcome."""

    decision: Decision
    use: str
    plan: Plan[Any] | None
    outcome: Outcome | None
    error: str = ""
    refused: bool = False  # not carried out: the plan, the fleet budget or a rail said no
    only_planned: str = ""  # "would_act" (a shadow rule) or "held" (a hold, a window)

    @property
    def result(self) -> str:
        """One word: ``refused``, ``error`` (plan failed), ``planned`` (dry run),
        ``would_act`` (a shadow rule's plan), ``held`` (planned while held), ``failed``,
        ``unverified`` (applied, but reading the effect back disagreed) or ``ok``."""
        if self.refused:
            return "refused"
        if self.error:
            return "error"
        if self.only_planned:
            return self.only_planned
        if self.outcome is None:
            return "planned"
        if not self.outcome.ok:
            return "failed"
        return "unverified" if self.outcome.verified is False else "ok"

    def describe(self) -> str:
        """One line for the journal and `guardian why`: the action, its result and what
        it changed or would change (``systemd.stop ok: systemctl stop ecs.service``)."""
        what = "; ".join(s.change for s in self.plan.steps) if self.plan else ""
        if self.plan and not what:
            what = self.plan.note or "nothing to change"
        if self.outcome is not None and not self.outcome.ok:
            what = f"{what} ({self.outcome.error})" if what else self.outcome.error
        elif self.error:
            what = f"{what} ({self.error})" if what else self.error
        if self.outcome is not None and self.outcome.ok and self.outcome.detail:
            what = f"{what} → {self.outcome.detail}" if what else self.outcome.detail  # found
        return f"{self.use} {self.result}: {what}" if what else f"{self.use} {self.result}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.decision.rule, "use": self.use,
            "plan": self.plan.to_dict() if self.plan else None,
            "outcome": self.outcome.to_dict() if self.outcome else None,
            "error": self.error, "refused": self.refused,
        }


@dataclass
class Executor:
    """Runs the actions of decisions against one host: the one path to ``apply()``.

    Only decisions an :class:`~guardian.engine.engine.Engine` emitted are applied (a dry run may
    plan any); a plan that refuses is never applied; a ``fleet = true`` rule's disruptive
    actions run only while this node holds a slot of the fleet budget. A shadow rule's
    actions (``mode = "observe"``) and the actions a hold or a closed maintenance window
    keeps waiting are planned and audited, never applied. The operator's ``guardian act``
    enters through :meth:`act`, with the same checks, audited as manual."""

    host: Host
    dry_run: bool = True
    audit: AuditLog | None = None
    clock: Callable[[], float] = time.time
    on_result: list[Callable[[Executed], None]] = field(default_factory=list)
    apply_timeout: float = 300.0
    fleet: FleetGate | None = None
    # why a decision must run in shadow on this node ("" when it acts as its rule says):
    # its node group (guardian.model.nodegroups), judged at each run. Where its
    # non-disruptive actions alone would act (this node's group cannot be told), only
    # the disruptive ones are planned: the rest run, so a human learns of the problem
    shadow: Callable[[Decision], str] | None = None

    audit_fault: str = ""  # why the audit log cannot be written now ("" when it can)
    running: dict[tuple[str, str], DeadlineRunner[Outcome]] = field(default_factory=dict)

    def audit_entry(self, record: AuditRecord) -> bool:
        """Append one record to the audit log (when there is one), stamped with the time:
        the one path to the audit trail. False when it could not be made durable (the
        fault is kept in ``audit_fault``)."""
        if self.audit is None:
            return True
        try:
            self.audit.write(record.entry(self.clock()))
        except OSError as exc:
            if not self.audit_fault:
                log.error("audit log %s cannot be written: %s; nothing is applied until it "
                          "can", self.audit.path, exc)
            self.audit_fault = f"audit log: {exc.strerror or exc}"
            return False
        self.audit_fault = ""
        return True

    def run(self, decisions: list[Decision], snapshot: Snapshot) -> list[Executed]:
        """Audit each decision and carry out its actions (plan only when dry-run)."""
        if self.audit is not None and self.audit.unopened is not None:
            # a disk fault kept the log closed since start: each pass tries again, so the
            # status says acting resumes as soon as the disk is back
            fault = self.audit.try_open()
            self.audit_fault = f"audit log: {fault.strerror or fault}" if fault else ""
        results: list[Executed] = []
        for d in decisions:
            shadowed = False  # its disruptive actions planned only, the others run
            if self.shadow is not None and d.mode != "observe" and d.actions:
                why = self.shadow(d)
                calm = [a for a in d.actions if not a.disruptive]
                if why and calm and len(calm) < len(d.actions) and \
                        not self.shadow(replace(d, actions=calm)):
                    shadowed = True
                elif why:  # its node group: planned and audited as would_act, not applied
                    d.mode = "observe"
                if why:
                    d.reason = f"{d.reason}; {why}" if d.reason else why
            self.audit_entry(DecisionRecord(**d.to_dict()))
            results.extend(self._carry_out(d, snapshot, shadowed))
            if d.fleet and d.kind == "resolved" and not self.dry_run and self.fleet \
                    and d.mode != "observe":
                self.fleet.done(d.rule)  # clean-up has run: the node gives its slot back
        if self.fleet is not None and not self.dry_run:
            self.fleet.renew()
        return results

    def _carry_out(self, d: Decision, snapshot: Snapshot, shadowed: bool = False
                   ) -> list[Executed]:
        """``d``'s actions as its mode, holds and the fleet budget allow; ``shadowed``:
        its disruptive actions are planned and audited as would_act, never applied."""
        if d.would or (d.mode == "observe" and d.actions):
            ctx = self._context(d, snapshot, True)
            how = "would_act" if d.mode == "observe" else "held"
            return [self._plan_only(d, b.use, b.action, ctx, how)
                    for b in (d.would or d.actions)]
        if not d.actions:
            return []
        if not d.from_engine and not self.dry_run:
            why = "not a decision of the engine: only engine decisions are applied"
            return [self._refuse(d, "(decision)", None, why)]
        results: list[Executed] = []
        ctx = self._context(d, snapshot, self.dry_run)
        may_disrupt = True
        if d.fleet and not self.dry_run and d.kind != "resolved" and not shadowed and \
                any(a.disruptive for a in d.actions):
            slot, why = self.fleet.hold(d.rule) if self.fleet else (
                None, "the rule needs the fleet budget, and [fleet] is not configured")
            if slot is None:
                may_disrupt = False
                self.audit_entry(FleetRefusedRecord(rule=d.rule, reason=why))
                log.warning("rule %s: no disruptive action: %s", d.rule, why)
                results.append(self._done(Executed(d, "(fleet budget)", None, None, why,
                                                   refused=True)))
        for bound in d.actions:
            if shadowed and bound.disruptive:
                results.append(self._plan_only(d, bound.use, bound.action,
                                               self._context(d, snapshot, True),
                                               "would_act"))
            elif may_disrupt or not bound.disruptive:
                results.append(self._execute(d, bound.use, bound.action, ctx))
        return results

    def _context(self, d: Decision, snapshot: Snapshot, dry_run: bool) -> ActionContext:
        return ActionContext(d.rule, snapshot, self.host, dry_run, values=d.values,
                             kind=d.kind, evidence=d.evidence, summary=d.summary,
                             severity=d.severity, labels=dict(d.labels), reason=d.reason,
                             units=d.units)

    def act(self, use: str, action: AnyAction, snapshot: Snapshot) -> Executed:
        """The operator's manual action (``guardian act``): the same plan, refusal and
        apply path as a rule's, audited as manual."""
        d = Decision(snapshot.time, "manual", "manual", "info", f"guardian act {use}")
        self.audit_entry(DecisionRecord(manual=True, **d.to_dict()))
        ctx = ActionContext("manual", snapshot, self.host, self.dry_run, kind="manual")
        return self._execute(d, use, action, ctx)

    def _plan_only(self, d: Decision, use: str, action: AnyAction, ctx: ActionContext,
                   how: str) -> Executed:
        """Plan and audit an action that is not to be applied (``how`` says why)."""
        try:
            plan = action.plan(ctx)
        except Exception as exc:
            ex = Executed(d, use, None, None,
                          error=scrub_for(action.params, f"plan failed: {in_words(exc)}"))
            self.audit_entry(ErrorRecord.model_validate(
                {"dry_run": self.dry_run, how: True, **ex.to_dict()}))
            return self._done(ex)
        self.audit_entry(PlanRecord.model_validate(
            {"dry_run": self.dry_run, how: True, "rule": d.rule, "use": use,
             "plan": plan.to_dict()}))
        return self._done(Executed(d, use, plan, None, only_planned=how))

    def _execute(self, d: Decision, use: str, action: AnyAction, ctx: ActionContext
                 ) -> Executed:
        """Plan one action, audit the plan, apply it unless dry-run, audit the outcome."""
        try:
            plan = action.plan(ctx)
        except Exception as exc:
            ex = Executed(d, use, None, None,
                          error=scrub_for(action.params, f"plan failed: {in_words(exc)}"))
            self.audit_entry(ErrorRecord(dry_run=self.dry_run, **ex.to_dict()))
            log.error("rule %s: action %s: %s", d.rule, use, ex.error)
            return self._done(ex)
        durable = self.audit_entry(PlanRecord(dry_run=self.dry_run, rule=d.rule, use=use,
                                              plan=plan.to_dict()))
        if plan.refused:
            return self._refuse(d, use, plan, "plan refused: " + "; ".join(plan.refused))
        if self.dry_run:
            return self._done(Executed(d, use, plan, None))
        if not durable:  # no apply() that the audit log would not show
            return self._refuse(d, use, plan, f"not applied: {self.audit_fault}")
        previous = self.running.get((d.rule, use))
        if previous is not None and previous.is_alive():
            return self._refuse(d, use, plan, "the previous run of this action is still "
                                              "going; its outcome is audited when it ends")
        started = time.monotonic()
        outcome = self._apply(action, plan, ctx, d.rule, use)
        outcome.data.setdefault("seconds", round(time.monotonic() - started, 6))
        approved = ({"approval": d.approval.to_dict()}
                    if d.approval is not None and type(action).disruptive else {})
        self.audit_entry(OutcomeRecord(rule=d.rule, use=use, outcome=outcome.to_dict(),
                                       **approved))
        if not outcome.ok:
            log.error("rule %s: action %s failed: %s", d.rule, use, outcome.error)
        return self._done(Executed(d, use, plan, outcome))

    def _apply(self, action: AnyAction, plan: Plan[Any], ctx: ActionContext, rule: str,
               use: str) -> Outcome:
        """Run apply in a worker thread, so a stuck action costs its caller at most
        ``apply_timeout``. The wait does nothing else: the watchdog is pinged by the
        service's loop alone, so a hung loop is never hidden by a busy action. An apply
        that overruns is reported, no second run of the action starts while it lives
        (:class:`~guardian.runtime.deadline.DeadlineRunner`), and its outcome is audited
        when it arrives."""
        runner = self.running.setdefault((rule, use),
                                         DeadlineRunner(f"guardian-apply-{use}"))

        def late(ran: Ran[Outcome]) -> None:
            outcome = _scrubbed(action, _outcome(ran))
            self.audit_entry(LateOutcomeRecord(rule=rule, use=use,
                                               outcome=outcome.to_dict()))
            log.warning("rule %s: action %s finished after its timeout: %s", rule, use,
                        "ok" if outcome.ok else outcome.error)

        ran = runner.run(lambda: action.apply(plan, ctx), self.apply_timeout, late=late)
        if ran.status == "overran":
            return Outcome(ok=False, error=f"apply did not finish within "
                                           f"{self.apply_timeout:g}s (left running; its "
                                           f"outcome is audited when it ends)")
        return _scrubbed(action, _outcome(ran))

    def _refuse(self, d: Decision, use: str, plan: Plan[Any] | None, why: str) -> Executed:
        """Not carried out: said once, in the log and in the audit trail."""
        self.audit_entry(RefusedRecord(dry_run=self.dry_run, rule=d.rule, use=use,
                                       reason=why))
        log.warning("rule %s: action %s not applied: %s", d.rule, use, why)
        return self._done(Executed(d, use, plan, None, error=why, refused=True))

    def _done(self, ex: Executed) -> Executed:
        if ex.outcome is not None and ex.outcome.ok:  # a failure or a refusal said so already
            log.warning("rule %s: %s", ex.decision.rule, ex.describe())
        for cb in self.on_result:
            cb(ex)
        return ex


def _scrubbed(action: AnyAction, outcome: Outcome) -> Outcome:
    """The outcome with the action's secrets taken out of what it says (an exception's
    text, a receiver's answer), as its parameters are redacted."""
    params = getattr(action, "params", None)
    outcome.error = scrub_for(params, outcome.error)
    outcome.detail = scrub_for(params, outcome.detail)
    return outcome


def _outcome(ran: Ran[Outcome]) -> Outcome:
    """An apply's outcome, whatever became of its call."""
    if ran.status == "done" and ran.value is not None:
        return ran.value
    if ran.status == "crashed":
        return Outcome(ok=False, error=f"apply raised {in_words(ran.error) if ran.error else None}")
    if ran.status == "unstarted":
        return Outcome(ok=False, error=f"cannot start the action's worker: {ran.error}")
    return Outcome(ok=False, error=f"apply ended as {ran.status}")
