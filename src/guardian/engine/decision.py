"""What the engine says: :class:`Decision` records, and their evidence rendered for
people and JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guardian.core.evidence import values_text
from guardian.core.snapshot import Family, SignalSpec, Value, format_key
from guardian.model.approvals import Approval
from guardian.model.condition import Condition
from guardian.model.kinds import DecisionKind
from guardian.model.ruleset import BoundAction, CompiledRule
from guardian.model.schema import Mode, Severity

# Decisions the engine emits carry this mark; the executor applies no other decision
# (a dry run may still plan one). It guards against mistakes, not against code that sets
# the mark on purpose.
ENGINE_MARK = object()


@dataclass
class Decision:
    """A state change of a rule, or an action run it asks for.

    ``kind`` is one of: ``pending``, ``firing``, ``retry`` (actions again while firing,
    after the cooldown), ``suppressed`` (wanted to act but a limit said no), ``held`` (its
    actions wait: while a rule that causes it is pending or firing, while a hold pauses
    it, or outside its maintenance window; the reason says which, and ``would`` lists the
    held actions, planned and audited but not applied), ``escalated`` (its actions ran
    their limit and it still fires: the rule's ``escalate`` actions, once; it needs a
    human), ``awaiting_approval`` (an approval gate's wait begins: ``would`` lists the
    actions that wait for a human's approval, planned and audited; ``approval`` on the
    decision that runs them says who approved, why and when), ``resolved``, ``inactive``
    (pending ended without firing); outside the engine, ``manual``, ``explain`` and
    ``would-fire`` (see :data:`~guardian.model.kinds.DecisionKind`).
    ``mode`` is ``observe`` for a shadow rule: its actions are planned and audited, never
    applied.
    """

    time: float
    rule: str
    kind: DecisionKind
    severity: Severity
    summary: str
    evidence: dict[str, Value | None] = field(default_factory=dict)
    actions: list[BoundAction] = field(default_factory=list)
    reason: str = ""
    fleet: bool = False  # the rule's disruptive actions need a slot of the fleet budget
    mode: Mode = "act"  # "observe": shadow mode, planned and audited, never applied
    labels: dict[str, str] = field(default_factory=dict)  # the rule's labels
    would: list[BoundAction] = field(default_factory=list)  # held: planned, not applied
    # the unit of each signal its evidence names ("restarts"), for the text people read
    units: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # a ladder's step its actions are (for ``resolved``: the steps run when it resolved;
    # a rule without steps counts its actions as one), and for ``resolved`` the seconds
    # since it fired: the outcome metrics read them
    step: int = field(default=0, compare=False)
    lasted: float | None = field(default=None, compare=False)
    # the approval that let its gated actions run (``approve``): who, why, when
    approval: Approval | None = field(default=None, compare=False)
    _mark: object = field(default=None, repr=False, compare=False)

    @property
    def values(self) -> dict[str, Any]:
        """The evidence rendered for people and JSON (labels as text, ``+Inf``)."""
        return render_values(self.evidence)

    @property
    def text(self) -> str:
        """The evidence as people read it (``$values``): see :func:`values_text`."""
        return values_text(self.values, self.units)

    @property
    def matched(self) -> Family | None:
        """For a family condition, the members that matched (typed: label tuples)."""
        m = self.evidence.get("matched")
        return m if isinstance(m, dict) else None

    @property
    def from_engine(self) -> bool:
        """True for a decision the engine emitted (the only kind that may act)."""
        return self._mark is ENGINE_MARK

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time, "rule": self.rule, "kind": self.kind,
            "severity": self.severity, "summary": self.summary, "values": self.values,
            "actions": [{"use": a.use, **a.public_params} for a in self.actions],
            "reason": self.reason,
            **({"step": self.step} if self.step else {}),
            **({"mode": self.mode} if self.mode != "act" else {}),
            **({"held_actions": [{"use": a.use, **a.public_params} for a in self.would]}
               if self.would else {}),
            **({"approval": self.approval.to_dict()} if self.approval else {}),
        }


def decision_values(rule: CompiledRule, values: Any, result: object
                    ) -> dict[str, Value | None]:
    """The signal values behind a decision (and, for family conditions, the members
    that matched, under ``matched``), typed; :func:`render_values` renders them."""
    return condition_values(rule.condition, values, result)


def condition_values(condition: Condition, values: Any, result: object
                     ) -> dict[str, Value | None]:
    """:func:`decision_values` of any condition (a rule's ``validate``)."""
    out: dict[str, Value | None] = {}
    for ref in condition.refs:
        v = ref.value(values)
        if isinstance(result, dict) and isinstance(v, dict):
            v = {k: x for k, x in v.items() if k in result}  # only what matched
        exact = ref.matchers and not any(is_glob for _, _, is_glob in ref.matchers)
        if exact and isinstance(v, dict) and len(v) == 1:
            v = next(iter(v.values()))  # the key already names the one member
        out[ref.key] = v
    if isinstance(result, dict):
        out["matched"] = result
    return out


def signal_units(rule: CompiledRule, signals: Mapping[str, SignalSpec],
                 condition: Condition | None = None) -> dict[str, str]:
    """The unit of each signal ``rule``'s condition (or ``condition``) names, from its
    spec."""
    return {r.name: signals[r.name].unit for r in (condition or rule.condition).refs
            if r.name in signals and signals[r.name].unit}


def render_values(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as the audit log, logs and ``--json`` show it: a family's members keyed
    by their labels as text, numbers as int where whole, infinities as text."""
    return {k: _plain(v) for k, v in evidence.items()}


def short(v: Any) -> str:
    """A rendered value in one short line: at most four members of a family."""
    if isinstance(v, dict):
        items = list(v.items())
        body = ", ".join(f"{k}: {x}" for k, x in items[:4])
        return "{" + body + (f", … {len(items) - 4} more" if len(items) > 4 else "") + "}"
    return "(no value)" if v is None else str(v)


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {(format_key("", k) or "{}") if isinstance(k, tuple) else k: _num(x)
                for k, x in sorted(v.items())}
    return None if v is None else _num(v)


def _num(x: Any) -> Any:
    if not isinstance(x, int | float):
        return x  # rendered already
    x = float(x)
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return int(x) if x.is_integer() and abs(x) < 2**53 else round(x, 6)
