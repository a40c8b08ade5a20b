"""guardian: a policy-driven remediation engine for Linux nodes.

Embedding takes a few lines::

    import guardian
    rules = guardian.load_rules(["rules/"])
    engine = guardian.Engine(rules)
    decisions = engine.evaluate(guardian.Snapshot(time=0.0, values={"memcg.dying": 9e4}))
"""

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

__version__ = "0.1.0"

__all__ = [
    "Action", "ActionContext", "Budget", "Collector", "Decision", "Diagnostic", "Engine",
    "Executor", "Host", "Outcome", "Plan", "Registry", "RegistryError", "RuleError",
    "Ruleset", "SignalSpec", "Snapshot",
    "Source", "Step", "default_registry", "labels_of", "load_rules", "load_text",
    "register_action", "register_source",
]
