"""Every record guardian writes to the audit log is typed (core/audit.py) and validates
against the shipped schema (schemas/audit.schema.json, `guardian schema audit`), issue 39.
The executor is driven down each of its paths; the daemon's and `guardian act`'s own kinds
go through the same one path, ``Executor.audit_entry``."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, ClassVar

import jsonschema

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.core.audit import (
    ActCrashRecord,
    AuditLog,
    ForcedRecord,
    RefusedRecord,
    SourceErrorRecord,
    SourceRecoveredRecord,
    audit_schema,
    read_audit,
)
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import default_registry
from guardian.testing import snapshot
from tests.support.checkout import REPO

WAIT = 10.0  # what a test waits for an event at most; never reached when it passes
RELEASE = threading.Event()


class Fails(Action[NoParams]):
    name: ClassVar[str] = "test.fails"

    def plan(self, ctx: ActionContext) -> Plan:
        raise RuntimeError("cannot plan")

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        raise AssertionError("never applied")


class Refuses(Action[NoParams]):
    name: ClassVar[str] = "test.refuses"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, refused=["not this one"])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        raise AssertionError("never applied")


class Late(Action[NoParams]):
    name: ClassVar[str] = "test.late"
    disruptive: ClassVar[bool] = False

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        RELEASE.wait(WAIT)
        return Outcome(ok=True, detail="at last")


class Disrupts(Action[NoParams]):
    name: ClassVar[str] = "test.disrupts"
    disruptive: ClassVar[bool] = True

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True)


def _rule(name: str, use: str, extra: str = "") -> str:
    return (f'[[rule]]\nname = "{name}"\nsummary = "s"\nwhen = "processes.total > 0"\n'
            f'cooldown = "1h"\n{extra}  [[rule.action]]\n  use = "{use}"\n')


def test_every_record_written_validates_against_the_shipped_schema(tmp_path: Path) -> None:
    shipped = json.loads((REPO / "schemas" / "audit.schema.json").read_text())
    assert shipped == audit_schema(), "regenerate: guardian schema audit > " \
                                      "schemas/audit.schema.json"
    reg = default_registry().copy()
    for cls in (Fails, Refuses, Late, Disrupts):
        reg.add_action(cls)
    rules = load_text("version = 1\n" + "".join([
        _rule("logs", "log"), _rule("fails", "test.fails"), _rule("refuses", "test.refuses"),
        _rule("late", "test.late"), _rule("shadow", "log", 'mode = "observe"\n'),
        _rule("fleet", "test.disrupts", "fleet = true\n")]), registry=reg)
    path = tmp_path / "audit.jsonl"
    ex = Executor(Host(), dry_run=False, audit=AuditLog(path), apply_timeout=WAIT)
    snap = snapshot(0.0, {"processes.total": 5.0})
    decisions = Engine(rules).evaluate(snap)
    ex.run([d for d in decisions if d.rule != "late"], snap)
    ex.apply_timeout = 0.0  # test.late overruns: its outcome comes late
    ex.run([d for d in decisions if d.rule == "late"], snap)
    ex.apply_timeout = WAIT
    RELEASE.set()
    assert ex.running[("late", "test.late")].join(WAIT)  # its late outcome is written
    ex.act("log", reg.actions["log"](reg.actions["log"].Params()), snap)
    # the kinds the daemon and `guardian act` write, through the same path
    for record in (RefusedRecord(manual=True, use="node.reboot", reason="a rail"),
                   ForcedRecord(use="node.reboot", overrides=["a rail"]),
                   ActCrashRecord(rules=["r"], error="RuntimeError('bug')"),
                   SourceErrorRecord(source="kmsg", error="EIO"),
                   SourceRecoveredRecord(source="kmsg")):
        assert ex.audit_entry(record)
    records: list[dict[str, Any]] = []
    for rec in read_audit(path):
        assert isinstance(rec, dict)
        records.append(rec)
    validator = jsonschema.Draft202012Validator(shipped)
    for rec in records:
        errors = [e.message for e in validator.iter_errors(rec)]
        assert not errors, (rec, errors)
    kinds = {d["properties"]["type"]["const"] for d in shipped["$defs"].values()}
    assert {r["type"] for r in records} == kinds  # every kind written, each one checked
    assert any(r.get("would_act") for r in records if r["type"] == "plan")
    assert any(r.get("manual") for r in records if r["type"] == "decision")
    # the step its actions are, structured (a rule without steps: one step), issue 42
    assert {r.get("step") for r in records if r["type"] == "decision"
            and r["kind"] == "firing" and not r.get("manual")} == {1}


def test_a_record_guardian_does_not_write_is_refused_by_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(audit_schema())
    good = {"type": "source_recovered", "source": "kmsg", "ts": 1.0}
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "sourse": "kmsg"})
    assert not validator.is_valid({**good, "type": "source_recoverd"})
    assert not validator.is_valid({k: v for k, v in good.items() if k != "ts"})
