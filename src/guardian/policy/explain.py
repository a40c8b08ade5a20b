"""Why a rule is where it is: its condition as a tree with the value of every
sub-expression, and what is missing."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guardian.core.evidence import amount, members_text
from guardian.core.snapshot import SignalSpec, format_labels
from guardian.model.condition import TimeFunctions
from guardian.policy.expr import compile_subexpression, parse_condition, selector_name

MAX_MEMBERS = 6


@dataclass
class ExplainNode:
    text: str
    value: Any
    children: list[ExplainNode] = field(default_factory=list)
    unit: str = ""  # the unit of the one signal it reads, where it keeps it

    def lines(self, depth: int = 0) -> list[str]:
        out = [f"{'  ' * depth}{self.text}  =  {value_text(self.value, self.unit)}"]
        for c in self.children:
            out.extend(c.lines(depth + 1))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"expr": self.text, "value": format_value(self.value),
                "children": [c.to_dict() for c in self.children]}


def value_text(v: Any, unit: str = "") -> str:
    """A sub-expression's value for people: members by their label values, the largest
    first (``ecs.service 17718 restarts, …and 60 more``), numbers rounded with their unit
    (``cpu=0 54.5%``); ``to_dict`` (JSON) keeps :func:`format_value`'s exact figures."""
    if isinstance(v, dict):
        return members_text(v, unit)
    if isinstance(v, float):
        return amount(v, unit)
    return format_value(v)


def format_value(v: Any) -> str:
    if v is None:
        return "no value"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        if not v:
            return "{} (no members)"
        items = sorted(v.items())
        shown = ", ".join(f"{format_labels(k)}: {_num(x)}" for k, x in items[:MAX_MEMBERS])
        more = f", … {len(items) - MAX_MEMBERS} more" if len(items) > MAX_MEMBERS else ""
        return "{" + shown + more + "}"
    if isinstance(v, float):
        return _num(v)
    return str(v)


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def explain_condition(text: str, catalogue: Mapping[str, SignalSpec],
                      values: Mapping[str, Any], history: TimeFunctions) -> ExplainNode:
    """Evaluate every sub-expression of a (valid) condition against ``values``."""
    source = "(" + text + "\n)"
    tree = parse_condition(text)

    def value(node: ast.AST) -> Any:
        return compile_subexpression(node, catalogue)(values, history)

    def build(node: ast.AST) -> ExplainNode:
        text_of = ast.get_source_segment(source, node) or ast.unparse(node)
        name = selector_name(node)
        if name is not None and name in catalogue:
            return ExplainNode(text_of, value(node), unit=catalogue[name].unit)  # one signal
        kids: list[ast.AST] = []
        if isinstance(node, ast.BoolOp):
            kids = list(node.values)
        elif isinstance(node, ast.Compare):
            kids = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp):
            kids = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            kids = [node.operand]
        elif isinstance(node, ast.Call):
            kids = [a for a in node.args
                    if not (isinstance(a, ast.Constant) and isinstance(a.value, str))]
        children = [build(k) for k in kids if not isinstance(k, ast.Constant)]
        return ExplainNode(" ".join(text_of.split()), value(node), children,
                           unit=_kept_unit(node, children))

    return build(tree.body)


_UNIT_CHANGING = {"rate", "count", "absent"}  # a per-second rate, a count of members, a truth


def _kept_unit(node: ast.AST, children: list[ExplainNode]) -> str:
    """The unit a number keeps through arithmetic, a time function or an aggregation
    over one signal (``20 * memcg.live``, ``delta(memcg.dying, "30m")``, ``max(x)``):
    none through a comparison, a boolean, a rate or where the parts' units differ."""
    if isinstance(node, ast.Compare | ast.BoolOp) or not children:
        return ""
    if isinstance(node, ast.Call) and selector_name(node) in _UNIT_CHANGING:
        return ""
    units = {c.unit for c in children}
    return units.pop() if len(units) == 1 else ""


def missing_signals(refs: list[Any], values: Mapping[str, Any]) -> list[str]:
    return [ref.key for ref in refs if ref.value(values) is None]
