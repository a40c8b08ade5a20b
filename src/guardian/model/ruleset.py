"""Loaded, checked rules as the engine and the executor use them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from guardian.core.snapshot import SignalSpec
from guardian.model.condition import Condition
from guardian.model.runtime import Lookback
from guardian.model.schema import ActionSpec, Recurs, Rule
from guardian.plugin.contract import Action
from guardian.plugin.secrets import redact


@dataclass
class BoundAction:
    """An action of a rule with its parameters validated and an instance ready to plan."""

    spec: ActionSpec
    action: Action[Any]

    @property
    def use(self) -> str:
        return self.spec.use

    @property
    def params(self) -> dict[str, Any]:
        """The parameters as written (secrets included: never show or store these)."""
        return self.spec.params

    @property
    def public_params(self) -> dict[str, Any]:
        """The parameters fit for logs, the audit trail and output: the fields the action's
        ``Params`` model marks secret are redacted."""
        return redact(type(self.action).Params, self.spec.params)

    @property
    def disruptive(self) -> bool:
        return type(self.action).disruptive

    @property
    def held_by_causes(self) -> bool:
        """Whether this action waits while a cause of its rule is active."""
        return self.disruptive and self.spec.hold


@dataclass
class CompiledStep:
    """A ladder's step: its bound actions, its ``verify`` in seconds and, for a step of
    a problem that recurs boot after boot, the boots it needs (``recurs``)."""

    actions: list[BoundAction]
    verify: float
    recurs: Recurs | None = None

    @property
    def uses(self) -> str:
        return ", ".join(a.use for a in self.actions)


@dataclass
class CompiledRule:
    spec: Rule
    path: str
    line: int
    condition: Condition
    actions: list[BoundAction]
    caused_by_at: tuple[int, int] = (0, 0)  # line, column of `caused_by` in the file
    escalate: list[BoundAction] = field(default_factory=list)  # after the limit, once
    steps: list[CompiledStep] = field(default_factory=list)  # a ladder, climbed in order
    validation: Condition | None = None  # `validate`: what opens the clean-up's gate
    # the rule's timing in whole milliseconds, as the engine compares it (exactly)
    for_ms: int = field(init=False)
    keep_firing_ms: int = field(init=False)

    def __post_init__(self) -> None:
        self.for_ms = round(self.spec.for_ * 1000)
        self.keep_firing_ms = round(self.spec.keep_firing_for * 1000)

    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def fingerprint(self) -> str:
        """What the rule does, in 16 hex digits: a change of its condition, timing,
        actions, steps or limits changes it (its name, summary, description and labels
        do not). A demotion, and the outcomes it was judged by, belong to one
        fingerprint."""
        said = self.spec.model_dump_json(exclude={"name", "summary", "description",
                                                  "labels"})
        return hashlib.sha256(said.encode()).hexdigest()[:16]

    @property
    def observe(self) -> bool:
        """Shadow mode: plans and audits what it would do, never applies."""
        return self.spec.mode == "observe"

    def bound_actions(self) -> Iterator[BoundAction]:
        """Every bound action of the rule: its actions (its clean-up's among them), its
        escalation, then each ladder step's. What ``guardian check`` asks of actions
        (their waits, their sandbox) is asked of each of these."""
        yield from self.actions
        yield from self.escalate
        for step in self.steps:
            yield from step.actions


@dataclass
class Ruleset:
    """Loaded, checked rules, ready for the engine."""

    rules: list[CompiledRule] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    signals: dict[str, SignalSpec] = field(default_factory=dict)  # the specs rules use
    _index: dict[str, CompiledRule] = field(default_factory=dict, repr=False, compare=False)

    @property
    def lookbacks(self) -> dict[Lookback, float]:
        """What the rules' time functions read, each with its longest window."""
        out: dict[Lookback, float] = {}
        for r in self.rules:
            for cond in (r.condition, r.validation):
                for key, w in (cond.lookbacks.items() if cond is not None else ()):
                    out[key] = max(out.get(key, 0.0), w)
        return out

    def by_name(self, name: str) -> CompiledRule | None:
        # the executor looks a rule up per decision: index once the list stops growing
        if len(self._index) != len(self.rules):
            self._index = {r.name: r for r in self.rules}
        return self._index.get(name)
