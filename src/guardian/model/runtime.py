"""Helpers the compiled conditions call for family (vector) values.

Scalar arithmetic and three-valued logic are inlined by the compiler; only operations on
families come here. ``None`` is "no value" and propagates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fnmatch import fnmatchcase

from guardian.core.snapshot import Family, Labels

Matcher = tuple[str, str, bool]  # label, value or glob, is_glob
Lookback = tuple[str, tuple[Matcher, ...] | None]  # a signal a time function reads, narrowed
Operand = float | Family | None


def matches(labels: Labels, matchers: tuple[Matcher, ...]) -> bool:
    d = dict(labels)
    for name, want, is_glob in matchers:
        got = d.get(name)
        if got is None or not (fnmatchcase(got, want) if is_glob else got == want):
            return False
    return True


def sel(fam: Family | None, matchers: tuple[Matcher, ...]) -> Family | None:
    if fam is None:
        return None
    return {k: v for k, v in fam.items() if matches(k, matchers)}


def _safe(op: Callable[[float, float], float], a: float, b: float) -> float | None:
    try:
        r = op(a, b)
    except (ZeroDivisionError, OverflowError, ValueError):
        return None
    return None if isinstance(r, complex) or math.isnan(r) else r


def vop(op: Callable[[float, float], float], a: Operand, b: Operand) -> Family | None:
    """Arithmetic where at least one side is a family; families match on equal labels."""
    if a is None or b is None:
        return None
    out: Family = {}
    if isinstance(a, dict):
        for k, v in a.items():
            other = (b.get(k) if isinstance(b, dict) else b)
            if other is not None and (r := _safe(op, v, other)) is not None:
                out[k] = r
    else:
        assert isinstance(b, dict)
        for k, v in b.items():
            if (r := _safe(op, a, v)) is not None:
                out[k] = r
    return out


def vcmp(op: Callable[[float, float], bool], a: Operand, b: Operand) -> Family | None:
    """Comparison where one side is a family: keeps the members for which it holds."""
    if a is None or b is None:
        return None
    if isinstance(a, dict):
        if isinstance(b, dict):
            return {k: v for k, v in a.items() if k in b and op(v, b[k])}
        return {k: v for k, v in a.items() if op(v, b)}
    assert isinstance(b, dict)
    return {k: v for k, v in b.items() if op(a, v)}


def truth(v: Family | None) -> bool | None:
    return None if v is None else bool(v)


# The max of no members is -Inf and the min +Inf (the identities of max and min), so
# `max(x) > 50` is false, not unknown, once a family empties: a rule over it resolves.
def agg_max(v: Family | None) -> float | None:
    return None if v is None else max(v.values(), default=-math.inf)


def agg_min(v: Family | None) -> float | None:
    return None if v is None else min(v.values(), default=math.inf)


def agg_avg(v: Family | None) -> float | None:
    return sum(v.values()) / len(v) if v else None


def agg_sum(v: Family | None) -> float | None:
    return None if v is None else float(sum(v.values()))


def agg_count(v: Family | None) -> float | None:
    return None if v is None else float(len(v))


def smax(*args: float | None) -> float | None:
    return None if any(a is None for a in args) else max(args)  # type: ignore[type-var]


def smin(*args: float | None) -> float | None:
    return None if any(a is None for a in args) else min(args)  # type: ignore[type-var]


def vabs(v: Operand) -> Operand:
    if v is None:
        return None
    if isinstance(v, dict):
        return {k: abs(x) for k, x in v.items()}
    return abs(v)


def vclamp(v: Operand, bound: float | None, upper: bool) -> Operand:
    """Prometheus' clamp_min (each value at least ``bound``) or, ``upper``, clamp_max."""
    if v is None or bound is None:
        return None
    pick = min if upper else max
    if isinstance(v, dict):
        return {k: pick(x, bound) for k, x in v.items()}
    return pick(v, bound)


def absent(v: Operand) -> bool:
    return v is None or (isinstance(v, dict) and not v)
