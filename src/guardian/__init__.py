"""guardian: a policy-driven remediation engine for Linux nodes.

Embedding takes a few lines::

    import guardian
    rules = guardian.load_rules(["rules/"])
    engine = guardian.Engine(rules)
    decisions = engine.evaluate(guardian.Snapshot(time=0.0, values={"memcg.dying": 9e4}))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .collector import Collector
    from .diagnostics import Diagnostic, RuleError
    from .engine import Budget, Decision, Engine
    from .executor import Executor
    from .host import Host
    from .model.ruleset import Ruleset
    from .plugins import (
        Action,
        ActionContext,
        Outcome,
        Plan,
        Registry,
        RegistryError,
        Source,
        Step,
        default_registry,
        register_action,
        register_source,
    )
    from .policy.loader import load_rules, load_text
    from .snapshot import SignalSpec, Snapshot, labels_of
    from .version import __version__ as __version__

# Imported on first use, so that `import guardian.cli` (every command) loads only what the
# command needs.
_WHERE = {
    "Collector": "collector", "Diagnostic": "diagnostics", "RuleError": "diagnostics",
    "Budget": "engine", "Decision": "engine", "Engine": "engine", "Executor": "executor",
    "Host": "host", "Ruleset": "model.ruleset", "load_rules": "policy.loader",
    "load_text": "policy.loader", "SignalSpec": "snapshot", "Snapshot": "snapshot",
    "labels_of": "snapshot", "__version__": "version",
    **dict.fromkeys(["Action", "ActionContext", "Outcome", "Plan", "Registry",
                     "RegistryError", "Source", "Step", "default_registry",
                     "register_action", "register_source"], "plugins"),
}

__all__ = [
    "Action", "ActionContext", "Budget", "Collector", "Decision", "Diagnostic", "Engine",
    "Executor", "Host", "Outcome", "Plan", "Registry", "RegistryError", "RuleError",
    "Ruleset", "SignalSpec", "Snapshot",
    "Source", "Step", "default_registry", "labels_of", "load_rules", "load_text",
    "register_action", "register_source",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'guardian' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
