"""Actions that misbehave: an effect that does not read back, an apply that outlives its
timeout."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.core.audit import AuditLog, read_audit
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import default_registry
from guardian.testing import snapshot
from tests.support.daemon import RULE


class Unread(Action[NoParams]):
    """Applies, but reading the effect back disagrees."""

    name: ClassVar[str] = "test.unread"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True, verified=False, detail="read-back disagrees")


def test_an_unverified_outcome_is_its_own_outcome() -> None:
    """Before: a cordon whose read-back disagreed counted as ok in the metrics."""
    reg = default_registry().copy()
    reg.add_action(Unread)
    rules = load_text(RULE.format(name="r").replace('use = "log"', 'use = "test.unread"'),
                      registry=reg)
    snap = snapshot(0.0, {"processes.total": 10.0})
    [done] = Executor(Host(), dry_run=False).run(Engine(rules).evaluate(snap), snap)
    assert done.result == "unverified"


class Slow(Action[NoParams]):
    """Outlives its timeout: its apply returns when the test releases it."""

    name: ClassVar[str] = "test.slow"
    started: ClassVar[int] = 0
    release: ClassVar[threading.Event] = threading.Event()

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Slow.started += 1
        if not Slow.release.wait(30):  # a bound on a broken test, never reached
            return Outcome(ok=False, error="never released")
        return Outcome(ok=True, detail="done at last")


class WatchedAudit(AuditLog):
    """The audit log, with an event set when a late outcome is written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.late = threading.Event()

    def write(self, record: dict[str, Any]) -> None:
        super().write(record)
        if record.get("type") == "late_outcome":
            self.late.set()


def test_no_retry_while_an_overrunning_apply_lives_and_its_late_outcome_is_audited(
        tmp_path: Path) -> None:
    """Before: an apply that outlived apply_timeout was reported failed while its thread
    went on, and the retry started a second worker beside it."""
    reg = default_registry().copy()
    reg.add_action(Slow)
    rules = load_text(RULE.format(name="r").replace('use = "log"', 'use = "test.slow"')
                      .replace('cooldown = "1h"', 'cooldown = "0s"'), registry=reg)
    engine = Engine(rules)
    audit = tmp_path / "a.jsonl"
    watched = WatchedAudit(audit)
    ex = Executor(Host(), dry_run=False, audit=watched, apply_timeout=0.3)
    first = snapshot(0.0, {"processes.total": 5.0})
    [timed_out] = ex.run(engine.evaluate(first), first)
    assert timed_out.result == "failed" and "did not finish within 0.3s" in \
        (timed_out.outcome.error if timed_out.outcome else "")
    again = snapshot(1.0, {"processes.total": 5.0})
    [retry] = ex.run(engine.evaluate(again), again)
    assert retry.refused and "still going" in retry.error
    assert Slow.started == 1 and not watched.late.is_set()
    Slow.release.set()  # the overrunning apply ends now
    assert watched.late.wait(30), "the late outcome was never audited"
    late = [r for r in read_audit(audit) if isinstance(r, dict) and r["type"] == "late_outcome"]
    assert len(late) == 1 and late[0]["outcome"]["detail"] == "done at last"
