"""What a rule's condition compared, for people: each comparison's operands with their
values now (``increase(kmsg.matches{pattern="hung_task"}, "10m")`` and its value, not the
counter it reads), and, for a comparison that holds on a family, the members that made
it hold. ``guardian run --once`` prints them beside each rule and ``guardian replay``
beside each decision (:func:`compared`); the audit log and ``--json`` keep the
decision's structured evidence (:func:`guardian.engine.decision.decision_values`).

A condition is read as PromQL reads it: a comparison on a family keeps the members for
which it holds, with the left side's values, so the members that made a rule fire are
those of its comparisons that hold."""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from guardian.core.evidence import amount, member, members_text
from guardian.core.snapshot import SignalSpec, Value
from guardian.model.condition import TimeFunctions
from guardian.model.ruleset import CompiledRule
from guardian.policy.expr import compile_subexpression, parse_condition, selector_name

__all__ = ["Operand", "compared", "operands"]

# functions whose value is not in the unit of the signal they read
_UNIT_CHANGING = {"rate", "count", "count_over_time", "changes", "resets", "absent",
                  "absent_over_time"}


@dataclass(frozen=True)
class Operand:
    """One side of a comparison (or a condition part that is not one), as the rule
    writes it, and its value now."""

    text: str  # as the rule writes it, whitespace folded
    value: Value | None  # now; for a comparison that holds on a family, its members
    unit: str  # the unit of the one signal it reads ("" when mixed or changed)
    fixed: frozenset[str]  # labels an exact matcher fixes (the text already names them)
    holds: bool  # whether its comparison holds (under any `not`: whether that is true)


@dataclass(frozen=True)
class _Side:
    """One operand of a part, compiled once: ``fn`` is None for the part itself."""

    fn: Callable[[Mapping[str, Any], TimeFunctions], Any] | None
    words: str
    unit: str
    fixed: frozenset[str]
    left: bool  # the left side of a comparison


@dataclass(frozen=True)
class _Part:
    fn: Callable[[Mapping[str, Any], TimeFunctions], Any]
    negated: bool
    compare: bool
    sides: tuple[_Side, ...]


# a condition's parts compiled once per (text, catalogue): `links` asks every tick
_PLANS: OrderedDict[tuple[str, int], tuple[Mapping[str, SignalSpec], list[_Part]]] = \
    OrderedDict()
_PLANS_KEPT = 512


def _plan(text: str, catalogue: Mapping[str, SignalSpec]) -> list[_Part]:
    key = (text, id(catalogue))
    kept = _PLANS.get(key)
    if kept is not None and kept[0] is catalogue:  # the entry holds the catalogue: no
        _PLANS.move_to_end(key)                    # other object can reuse its id
        return kept[1]
    source = "(" + text + "\n)"
    parts: list[_Part] = []
    seen: set[str] = set()
    for part, negated in _parts(parse_condition(text).body):
        compare = isinstance(part, ast.Compare)
        sides: list[_Side] = []
        for side in [part.left, *part.comparators] if isinstance(part, ast.Compare) \
                else [part]:
            if _constant(side):
                continue
            words = " ".join((ast.get_source_segment(source, side) or ast.unparse(side))
                             .split())
            if words in seen:
                continue
            seen.add(words)
            fn = None if side is part else compile_subexpression(side, catalogue)
            sides.append(_Side(fn, words, _unit(side, catalogue), _fixed(side, catalogue),
                               compare and side is getattr(part, "left", None)))
        parts.append(_Part(compile_subexpression(part, catalogue), negated, compare,
                           tuple(sides)))
    _PLANS[key] = (catalogue, parts)
    if len(_PLANS) > _PLANS_KEPT:
        _PLANS.popitem(last=False)
    return parts


def operands(rule: CompiledRule, catalogue: Mapping[str, SignalSpec],
             values: Mapping[str, Any], history: TimeFunctions) -> list[Operand]:
    """Every operand of every comparison of ``rule``'s condition (a part that compares
    nothing, such as a bare family, is its own operand), once each, in the rule's order,
    with its value against ``values``. Constants are left out: the rule's text says
    them."""
    out: list[Operand] = []
    for part in _plan(rule.spec.when, catalogue):
        result = part.fn(values, history)
        truth = _truthy(result)
        holds = truth is not None and truth != part.negated
        for side in part.sides:
            v = result if side.fn is None else side.fn(values, history)
            if side.left and holds and isinstance(result, dict) and isinstance(v, dict):
                v = {k: x for k, x in v.items() if k in result}  # the members that hold
            out.append(Operand(side.words, v, side.unit, side.fixed, holds))
    return out


def compared(rule: CompiledRule, catalogue: Mapping[str, SignalSpec],
             values: Mapping[str, Any], history: TimeFunctions, *, holds: bool
             ) -> list[str]:
    """What the condition compared, as the pieces of one line (a line on a narrow
    terminal breaks only between them): when it holds, the comparisons that hold and
    the members that made them (``cpu.core.sys_pct: cpu=1 97%``); when not, every
    operand's value now, a family's largest few (``cpu.core.sys_pct: cpu=1 4%, cpu=0
    1%``); numbers rounded with their units (:mod:`guardian.core.evidence`)."""
    try:
        parts = operands(rule, catalogue, values, history)
    except Exception:  # words for people must not end the pass
        return _said([(ref.key, [_said_value(ref.value(values), _spec_unit(catalogue,
                                                                           ref.name))])
                      for ref in rule.condition.refs])
    if holds and any(p.holds for p in parts):
        parts = [p for p in parts if p.holds]
    limit = 5 if holds else 3
    # operands alike but for one matcher's value are said in one:
    # `increase(kmsg.matches{pattern=…}, "1h"): kernel_oops 0 lines, null_deref 0 lines`
    groups: dict[str, list[tuple[str, str, str]]] = {}  # key -> (text, word, value)
    for p in parts:
        m = list(_ONE_MATCHER.finditer(p.text))
        v = p.value
        value = _said_value(v, p.unit, p.fixed, limit)
        if len(m) == 1 and (not isinstance(v, dict) or not v or (
                len(v) == 1 and not member(next(iter(v)), p.fixed))):
            key = f"{p.text[:m[0].start()]}{{{m[0].group(1)}=…}}{p.text[m[0].end():]}"
            word = member(((m[0].group(1), m[0].group(2)),))
        else:
            key, word = p.text, ""
        groups.setdefault(key, []).append((p.text, word, value))
    return _said([(key, [f"{word} {value}" for _, word, value in alike])
                  if len(alike) > 1 else (alike[0][0], [alike[0][2]])
                  for key, alike in groups.items()])


def _said_value(v: Any, unit: str, fixed: Collection[str] = (), limit: int = 3) -> str:
    """One operand's value: a family's largest ``limit`` members, or the value."""
    return members_text(v, unit, fixed, limit) if isinstance(v, dict) else amount(v, unit)


def _said(groups: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """``[(what, [value, ...]), ...]`` as the pieces of ``what: a, b; what2: c``, each
    value (or member of one) a piece: the line breaks only between them."""
    pieces: list[str] = []
    for g, (what, vals) in enumerate(groups):
        items = [item for v in vals for item in v.split(", ")]
        items[0] = f"{what}: {items[0]}"
        pieces += [f"{item}," for item in items[:-1]] + \
            [items[-1] + (";" if g < len(groups) - 1 else "")]
    return pieces


_ONE_MATCHER = re.compile(r'\{(\w+)="([^"*?\[\]]*)"\}')  # a selector of one exact matcher


def _spec_unit(catalogue: Mapping[str, SignalSpec], name: str) -> str:
    spec = catalogue.get(name)
    return spec.unit if spec is not None else ""


def _parts(node: ast.AST, negated: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """The parts `and`, `or` and `not` join, each with whether a `not` is above it."""
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            yield from _parts(v, negated)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield from _parts(node.operand, not negated)
    else:
        yield node, negated


def _truthy(result: Any) -> bool | None:
    """None for no value; a family holds while it has members."""
    return None if result is None else bool(result)


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return isinstance(node, ast.Constant)


def _selectors(node: ast.AST, catalogue: Mapping[str, SignalSpec]) -> list[ast.AST]:
    out: list[ast.AST] = []

    def walk(n: ast.AST) -> None:
        if isinstance(n, ast.Call | ast.Name | ast.Attribute) and \
                selector_name(n) in catalogue:
            out.append(n)
            return
        for child in ast.iter_child_nodes(n):
            walk(child)

    walk(node)
    return out


def _unit(node: ast.AST, catalogue: Mapping[str, SignalSpec]) -> str:
    names = {selector_name(s) for s in _selectors(node, catalogue)}
    if len(names) != 1:
        return ""
    changed = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id in _UNIT_CHANGING for n in ast.walk(node))
    name = next(iter(names))
    return "" if changed or name is None else catalogue[name].unit


def _fixed(node: ast.AST, catalogue: Mapping[str, SignalSpec]) -> frozenset[str]:
    fixed: set[str] = set()
    for sel in _selectors(node, catalogue):
        if isinstance(sel, ast.Call):
            for kw in sel.keywords:
                if kw.arg and isinstance(kw.value, ast.Constant) and \
                        isinstance(kw.value.value, str) and \
                        not any(c in kw.value.value for c in "*?["):
                    fixed.add(kw.arg)
    return frozenset(fixed)
