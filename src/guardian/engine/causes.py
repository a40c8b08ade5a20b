"""Causes (a rule's ``caused_by``): the order rules are evaluated in, and the causes
whose activity holds a symptom's disruptive actions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from guardian.engine.lifecycle import RuleState
from guardian.model.kinds import Phase
from guardian.model.ruleset import CompiledRule
from guardian.model.schema import Severity

SEVERITY_ORDER: dict[Severity, int] = {"critical": 0, "warning": 1, "info": 2}


def evaluation_order(rules: Iterable[CompiledRule]) -> list[CompiledRule]:
    """The enabled ``rules``, most severe first, each after the rules that cause it."""
    return causes_first(sorted((r for r in rules if r.spec.enabled),
                               key=lambda r: SEVERITY_ORDER[r.spec.severity]))


def causes_first(rules: list[CompiledRule]) -> list[CompiledRule]:
    """``rules`` in their order, except that a rule comes after the rules that cause it
    (its `caused_by`), so a symptom sees its causes' phase of the same evaluation."""
    by_name = {r.name: r for r in rules}
    out: list[CompiledRule] = []
    placed: set[str] = set()

    def place(r: CompiledRule, trail: frozenset[str]) -> None:
        if r.name in placed or r.name in trail:  # a cycle (refused at load) stops here
            return
        for cause in r.spec.caused_by:
            if cause in by_name:
                place(by_name[cause], trail | {r.name})
        placed.add(r.name)
        out.append(r)

    for r in rules:
        place(r, frozenset())
    return out


def holders(rule: CompiledRule, states: Mapping[str, RuleState]) -> list[tuple[str, Phase]]:
    """The causes of ``rule`` that are pending or firing, with their phase: while there
    are any, its disruptive actions are held."""
    out: list[tuple[str, Phase]] = []
    for cause in rule.spec.caused_by:
        st = states.get(cause)
        if st is not None and st.phase in ("pending", "firing"):
            out.append((cause, st.phase))
    return out
