"""The types, checked by mypy itself (``mypy --strict`` on snippets): a misspelled
decision kind or rule phase is a type error, a built-in plan payload's keys are checked,
and a plugin that names no payload passes unchanged. The types at run time:
tests/unit/test_types.py and tests/unit/engine/test_engine_types.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

import guardian

SNIPPET = '''
from guardian.engine.decision import Decision
from guardian.engine.lifecycle import RuleState
from guardian.plugin.contract import ActionContext


def over(d: Decision) -> bool:
    return d.kind == "{kind}"


def acting(ctx: ActionContext) -> bool:
    return ctx.kind != "{kind}"


def on(st: RuleState) -> bool:
    return st.phase == "{phase}"


def new(d: Decision) -> Decision:
    return Decision(d.time, d.rule, "{kind}", d.severity, d.summary)
'''


def _mypy(tmp_path: Path, kind: str, phase: str) -> tuple[str, int]:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET.format(kind=kind, phase=phase))
    out, err, rc = api.run(["--strict", "--python-version", "3.10", "--no-error-summary",
                            "--cache-dir", str(tmp_path / "cache"), str(path)])
    return out + err, rc


def test_mypy_strict_catches_a_misspelled_kind_or_phase(tmp_path: Path) -> None:
    out, rc = _mypy(tmp_path, "resolved", "firing")
    assert rc == 0, out
    out, rc = _mypy(tmp_path, "resovled", "fiering")
    assert rc == 1
    assert out.count("[comparison-overlap]") == 3, out
    assert out.count("[arg-type]") == 1, out


MISUSE = """
from guardian.actions.memcg import MemcgPayload, MemcgRelease
from guardian.plugin.contract import ActionContext, Plan


def path_of(action: MemcgRelease, ctx: ActionContext) -> str:
    return action.plan(ctx).data["pth"]


def made(rule: str) -> Plan[MemcgPayload]:
    return Plan("memcg.release", rule, data={"dying_befor": 3})
"""


PLUGIN = """
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from guardian import Action, ActionContext, Outcome, Plan, Step


class NoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


class Bare(Action[NoteParams]):
    name: ClassVar[str] = "acme.bare"
    Params = NoteParams

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True)


class Note(Action[NoteParams]):
    name: ClassVar[str] = "acme.note"
    Params = NoteParams

    def plan(self, ctx: ActionContext) -> Plan:
        plan = Plan(self.name, ctx.rule, [Step(self.params.path, "append")])
        plan.data["line"] = ctx.rule
        return plan

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True, detail=str(plan.data["line"]))
"""


def test_mypy_checks_builtin_payloads_and_passes_a_plugin_without_one(
        tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    src = Path(guardian.__file__).resolve().parent.parent
    (tmp_path / "mypy.ini").write_text(textwrap.dedent(f"""\
        [mypy]
        mypy_path = {src}
        plugins = pydantic.mypy
        cache_dir = {tmp_path / "cache"}
        """))
    (tmp_path / "misuse.py").write_text(MISUSE)
    (tmp_path / "plugin.py").write_text(PLUGIN)
    out, err, _ = api.run(["--config-file", str(tmp_path / "mypy.ini"), "--strict",
                           "--python-version", "3.10", "--no-error-summary",
                           "--follow-imports=silent", "--show-error-codes",
                           str(tmp_path / "misuse.py"), str(tmp_path / "plugin.py")])
    lines = [line for line in out.splitlines() if ": error:" in line]
    assert not err, err
    assert not [line for line in lines if "plugin.py" in line], out
    misuse = [line for line in lines if "misuse.py" in line]
    assert any('"pth"' in line for line in misuse), out
    assert any('"dying_befor"' in line for line in misuse), out
    assert all("misuse.py" in line for line in lines), out
