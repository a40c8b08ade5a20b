"""Types that say what they mean: one base error class and a typed action in the
executor. That mypy checks the built-in plan payloads' keys while a plugin that names no
payload still passes ``mypy --strict``: tests/system/test_typing.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

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
