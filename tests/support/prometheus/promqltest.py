"""A reader of Prometheus' own PromQL test files (promql/promqltest: `load`, `clear`,
`eval instant at`), running the evaluations of the range functions and clamps guardian
shares with PromQL through guardian's compiler and history.

An evaluation runs when its expression is in the shared language once written
guardian's way (`f(x[5m])` is `f(x, "5m")`); one that needs what guardian does not have
(histograms, `@`, `offset`, subqueries, regex matchers, `by`, functions guardian lacks,
expected failures) is counted as skipped, with the reason. Values are compared as
promqltest does: equal within a relative 1e-6, NaN equal to NaN.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from guardian.core.durations import parse_duration
from guardian.core.snapshot import Family, Labels, SignalSpec
from guardian.engine.history import History
from guardian.policy.expr import ExprError, compile_subexpression, parse_condition
from guardian.policy.ruletest import parse_series

ABSENT = "(absent)"  # a condition's true, beside PromQL's `{labels} 1`
LOOKBACK = 300.0  # PromQL's lookback delta: an instant selector's newest sample within 5m
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SELECTOR = re.compile(r"^([a-zA-Z_:][\w:]*)?(\{[^}]*\})?$")


def _labels(text: str) -> Labels:
    return tuple(sorted(_LABEL.findall(text or "")))


def labels_text(key: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in key) + "}"


@dataclass
class Eval:
    line: int
    at: float
    expr: str
    want: dict[str, float]
    fail: bool = False
    unreadable: bool = False  # a histogram among the expected values


@dataclass
class Load:
    interval: float
    series: dict[tuple[str, Labels], list[float | None]]
    unreadable: set[str] = field(default_factory=set)  # names with histograms, stale
    nan: set[str] = field(default_factory=set)  # names with NaN samples


@dataclass
class Outcome:
    passed: list[Eval] = field(default_factory=list)
    # passed, but for a NaN result guardian gives no value (docs/rules.md's documented
    # difference: arithmetic that has no number has no value)
    nan_is_no_value: list[Eval] = field(default_factory=list)
    failed: list[tuple[Eval, dict[str, float]]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def _value(token: str) -> str:
    return {"Inf": "inf", "+Inf": "inf", "-Inf": "-inf", "NaN": "nan"}.get(token, token)


def _series_values(text: str) -> list[float | None]:
    out: list[float | None] = []
    for tok in text.split():
        low = _value(tok)
        if low in ("inf", "-inf", "nan"):
            out.append(float(low))
        else:
            out.extend(parse_series(tok))
    return out


def _duration(text: str) -> float:
    return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)


def parse(text: str) -> list[Load | Eval]:
    """The statements of a promqltest file, in order (a ``clear`` is an empty load)."""
    out: list[Load | Eval] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if line.startswith("clear"):
            out.append(Load(0.0, {}))
        elif line.startswith("load "):
            load = Load(_duration(line.split()[1]), {})
            while i < len(lines) and lines[i][:1] in (" ", "\t") and lines[i].strip():
                body = lines[i].strip()
                close = body.find("}") if "{" in body.split()[0] else -1
                sel, values = ((body[:close + 1], body[close + 1:]) if close >= 0
                               else (body.split()[0], body[len(body.split()[0]):]))
                name = sel.split("{")[0]
                try:  # a float function ignores histogram and stale series: so do we
                    if "{{" in values or "stale" in values:
                        raise ValueError("histogram or stale samples")
                    samples = _series_values(values)
                    load.series[(name, _labels(sel[len(name):]))] = samples
                    if any(v is not None and math.isnan(v) for v in samples):
                        load.nan.add(name)
                except ValueError:
                    load.unreadable.add(name)
                i += 1
            out.append(load)
        elif line.startswith(("eval instant at ", "eval_ordered instant at ",
                              "eval_fail instant at ")):
            words = line.split(maxsplit=4)
            ev = Eval(i, _duration(words[3]), words[4], {},
                      fail=line.startswith("eval_fail"))
            while i < len(lines) and lines[i][:1] in (" ", "\t") and lines[i].strip():
                body = lines[i].strip()
                i += 1
                if body.startswith("#"):
                    continue
                if body.startswith("expect"):
                    ev.fail = ev.fail or body.startswith("expect fail")
                    continue
                sel, value = body.rsplit(None, 1) if " " in body or "\t" in body \
                    else ("", body)
                brace = sel.find("{")
                key = _labels(sel[brace:]) if brace >= 0 else ()
                try:
                    ev.want[labels_text(key)] = float(_value(value))
                except ValueError:
                    ev.unreadable = True
            out.append(ev)
    return out


_RANGE = re.compile(r"([a-zA-Z_:][\w:]*(?:\{[^}]*\})?)\[(\d+(?:ms|s|m|h|d)?)\]")
_PAREN_RANGE = re.compile(r"(?<![\w])\(([a-zA-Z_:][\w:]*(?:\{[^}]*\})?\[[^\]]+\])\)")
_UNSUPPORTED = ("@", " offset ", "=~", "!~", "!=", ":]", " by ", " without ", "{{",
                "__name__")


def to_guardian(expr: str) -> str:
    """``f(x[5m])`` as ``f(x, "5m")``; a duration as predict_linear's number of seconds.
    Raises ValueError for what the shared language has no words for."""
    if any(u in expr for u in _UNSUPPORTED) or re.search(r"\[[^\]]*:", expr):
        raise ValueError("syntax guardian lacks")
    while _PAREN_RANGE.search(expr):
        expr = _PAREN_RANGE.sub(r"\1", expr)

    def window(m: re.Match[str]) -> str:
        w = m[2] if not m[2].isdigit() else f"{m[2]}s"
        return f'{m[1]}, "{w}"'
    out = _RANGE.sub(window, expr)
    return re.sub(r'(predict_linear\([^"]*"[^"]*"), (\d+[smhd])\)',
                  lambda m: f"{m[1]}, {parse_duration(m[2]):g})", out)


def run(text: str, functions: tuple[str, ...]) -> Outcome:
    """Every evaluation in ``text`` that calls one of ``functions``."""
    result = Outcome()
    load = Load(0.0, {})
    for st in parse(text):
        if isinstance(st, Load):
            load = st
            continue
        if not re.search(rf"\b(?:{'|'.join(functions)})\(", st.expr):
            continue
        why = _skip(st, load)
        if why:
            result.skipped[why] += 1
            continue
        got = _evaluate(load, to_guardian(st.expr), st.at)
        if got is None:
            result.skipped["not in the shared language"] += 1
            continue
        if _same(st.want, got):
            result.passed.append(st)
        elif _same({k: v for k, v in st.want.items() if not math.isnan(v)}, got):
            result.nan_is_no_value.append(st)
        else:
            result.failed.append((st, got))
    return result


def _skip(st: Eval, load: Load) -> str:
    if st.fail:
        return "an expected failure"
    if st.unreadable:
        return "histogram or stale samples"
    try:
        to_guardian(st.expr)
    except ValueError as exc:
        return str(exc)
    if any(re.search(rf"\b{re.escape(n)}\b", st.expr) for n in load.unreadable) and \
            re.search(r"\b(?:count_over_time|last_over_time|absent_over_time|changes|resets)\(",
                      st.expr):  # these count histogram samples too
        return "histogram or stale samples"
    loaded = {n for n, _ in load.series}
    if any(re.search(rf"\b{re.escape(n)}\b", st.expr) for n in load.unreadable - loaded):
        return "histogram or stale samples"
    if re.search(r"(?:^|[(,\s])\{", st.expr):
        return "a selector without a metric name"
    if any(re.search(rf"\b{re.escape(n)}\b", st.expr) for n in load.nan):
        return "NaN samples (guardian's sources give finite numbers; NaN is its no-value)"
    return ""


def _evaluate(load: Load, text: str, at: float) -> dict[str, float] | None:
    names = {n for n, _ in load.series}
    label_names = tuple(sorted({k for _, key in load.series for k, _ in key} | set(
        re.findall(r"(\w+)=", text)) | {"x"}))
    catalogue = {n: SignalSpec(n, "promqltest series", labels=label_names) for n in names}
    catalogue.update({n: SignalSpec(n, "absent", labels=label_names) for n in
                      set(re.findall(r"[a-zA-Z_:][\w:]*", text)) - names
                      if n.endswith(("_metric", "_total")) or n == "nonexistent"})
    try:
        fn = compile_subexpression(parse_condition(text).body, catalogue)
    except (ExprError, SyntaxError, ValueError):
        return None
    history = History({n: 86400.0 for n in catalogue})
    steps = sorted({i for s in load.series.values() for i in range(len(s))})
    now: dict[str, Family] = {n: {} for n in catalogue}
    seen: dict[tuple[str, Labels], float] = {}
    for i in steps:
        t = i * load.interval
        if t > at:
            break
        values: dict[str, Family] = {n: {} for n in catalogue}
        for (name, key), s in load.series.items():
            if i < len(s) and (v := s[i]) is not None:
                values[name][key] = v
                seen[(name, key)] = t
        history.record(t, values)
        for (name, key), s in load.series.items():  # PromQL's instant selectors
            if i < len(s) and s[i] is not None:
                now[name][key] = s[i]  # type: ignore[assignment]
    if not steps or steps[-1] * load.interval < at or at not in {i * load.interval
                                                                   for i in steps}:
        history.record(at, {})
    instant = {n: {k: v for k, v in fam.items() if at - seen[(n, k)] < LOOKBACK}
               for n, fam in now.items()}
    got = fn(instant, history)
    if isinstance(got, dict):
        return {labels_text(k): v for k, v in got.items()}
    if isinstance(got, bool):  # guardian's absent_over_time is a condition: no labels
        return {ABSENT: 1.0} if got else {}
    return {} if got is None else {"{}": float(got)}


def _same(want: dict[str, float], got: dict[str, float]) -> bool:
    if ABSENT in got or (not got and any(v == 1.0 for v in want.values())):
        return bool(got) == bool(want)  # true exactly when PromQL has its 1
    if want.keys() != got.keys():
        return False
    for k, a in want.items():
        b = got[k]
        if math.isnan(a) and math.isnan(b):
            continue
        if a != b and not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12):
            return False
    return True
