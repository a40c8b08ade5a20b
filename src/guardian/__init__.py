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
    from guardian.core.diagnostics import Diagnostic, RuleError
    from guardian.core.errors import GuardianError
    from guardian.core.snapshot import SignalSpec, Snapshot, labels_of
    from guardian.core.version import __version__ as __version__
    from guardian.engine.bounds import Budget
    from guardian.engine.decision import Decision
    from guardian.engine.engine import Engine
    from guardian.hostio.host import Host
    from guardian.model.ruleset import Ruleset
    from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Source, Step
    from guardian.plugin.registry import (
        Registry,
        RegistryError,
        default_registry,
        register_action,
        register_source,
    )
    from guardian.policy.loader import load_rules, load_text
    from guardian.runtime.collector import Collector
    from guardian.runtime.executor import Executor

# Imported on first use, so that `import guardian.cli` (every command) loads only what the
# command needs.
_WHERE = {
    "Collector": "runtime.collector", "Diagnostic": "core.diagnostics",
    "RuleError": "core.diagnostics", "Budget": "engine.bounds", "Decision": "engine.decision",
    "Engine": "engine.engine", "Executor": "runtime.executor", "Host": "hostio.host",
    "GuardianError": "core.errors",
    "Ruleset": "model.ruleset", "load_rules": "policy.loader", "load_text": "policy.loader",
    "SignalSpec": "core.snapshot", "Snapshot": "core.snapshot", "labels_of": "core.snapshot",
    "__version__": "core.version",
    **dict.fromkeys(["Action", "ActionContext", "Outcome", "Plan", "Source", "Step"],
                    "plugin.contract"),
    **dict.fromkeys(["Registry", "RegistryError", "default_registry", "register_action",
                     "register_source"], "plugin.registry"),
}

__all__ = [
    "Action", "ActionContext", "Budget", "Collector", "Decision", "Diagnostic", "Engine",
    "Executor", "GuardianError", "Host", "Outcome", "Plan", "Registry", "RegistryError",
    "RuleError", "Ruleset", "SignalSpec", "Snapshot",
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
