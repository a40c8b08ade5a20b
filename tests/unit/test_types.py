"""Types that say what they mean: one base error class, a typed action in the executor,
and plan payloads whose keys mypy checks in the built-ins while a plugin that names no
payload still passes ``mypy --strict`` unchanged."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import textwrap
import typing
from pathlib import Path

import pytest

import guardian
from guardian.core.errors import GuardianError
from guardian.plugin.contract import Action
from guardian.runtime.executor import Executor

OPTIONAL = {"lightkube", "httpx2", "matplotlib"}  # extras a module may need


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(guardian.__path__, "guardian.")]
    return [n for n in names if n != "guardian.__main__"]


def _exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in OPTIONAL:
                continue
            raise
        found += [obj for obj in vars(module).values()
                  if inspect.isclass(obj) and issubclass(obj, BaseException)
                  and obj.__module__ == name]
    return found


def test_every_exception_of_guardian_is_a_guardian_error() -> None:
    found = _exceptions()
    assert len(found) >= 10, found  # the walk found guardian's errors at all
    stray = [f"{c.__module__}.{c.__qualname__}" for c in found
             if not issubclass(c, GuardianError)]
    assert not stray, f"not derived from GuardianError: {stray}"


def test_errors_keep_their_builtin_base() -> None:
    from guardian.hostio.systemdclient import SystemdError
    from guardian.plugin.contract import SampleError

    assert issubclass(SampleError, ValueError) and issubclass(SystemdError, RuntimeError)
    assert guardian.GuardianError is GuardianError and "GuardianError" in guardian.__all__
    assert GuardianError.__doc__ and "traceback" in GuardianError.__doc__


@pytest.mark.parametrize("method", ["act", "_plan_only", "_execute", "_apply"])
def test_the_executor_types_its_action(method: str) -> None:
    hint = typing.get_type_hints(getattr(Executor, method))["action"]
    assert hint is not typing.Any
    assert typing.get_origin(hint) is Action or hint is Action


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
