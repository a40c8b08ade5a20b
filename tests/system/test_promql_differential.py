"""Guardian's expressions against Prometheus' own evaluator: `promtool test rules`
(Debian's prometheus package; .ci/run installs it) over generated, seeded cases in the
languages' shared part: the time functions, the new range functions, arithmetic (with
`%` on negative operands), aggregations, `abs` and `clamp_*`, label matchers, counter
resets, gaps, and the series notation (fractional steps included).

Every case is evaluated by both. Where docs/rules.md's table of deliberate differences says
guardian differs, the comparison emulates the difference instead of skipping the case:
`rate`, `increase` and `delta` are compared against Prometheus' extrapolation
(promql/functions.go extrapolatedRate, reimplemented below from its definition), and an
aggregation over an empty family against PromQL's empty result. Cases avoid the two
differences that are not functions: a sample exactly on a window's left edge (Prometheus
2.x, as promtool 2.42 here, includes it; 3.x and guardian do not: the windows are never a
multiple of the interval) and a missing sample at an evaluation (PromQL's 5-minute
lookback: evaluations fall where every series has a sample).
"""

from __future__ import annotations

import math
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import Family, Labels, SignalSpec
from guardian.engine.history import History
from guardian.model import runtime
from guardian.policy import expr as expr_module
from guardian.policy.expr import compile_subexpression, parse_condition
from guardian.policy.ruletest import parse_series

SEED = 20261203
GROUPS = 45
CASES_PER_GROUP = 12  # 540 cases
STEPS = 24  # samples per series, one a minute
WINDOWS = ("90s", "150s", "210s", "330s")  # never a multiple of the interval
CATALOGUE = {n: SignalSpec(n, "a generated series", labels=("i",)) for n in ("m", "k")}
MEMBERS = ("0", "1", "2")


# -- generated cases ------------------------------------------------------------------

def _notation(rng: random.Random) -> str:
    """A series in promtool's notation: runs with steps (fractional ones too), repeats,
    counter resets and gaps."""
    parts: list[str] = []
    n = 0
    value = rng.choice([0, 1, 5, 9.8, 100])
    while n < STEPS:
        kind = rng.random()
        run = rng.randint(1, 4)
        if kind < 0.1:
            parts.append("_" if run == 1 else f"_x{run}")
            n += run
            continue
        if kind < 0.2:  # a counter reset
            value = rng.choice([0, 1, 2])
        step = rng.choice(["1", "2", "0.1", "0.3", "0", "-0.1", "5"])
        parts.append(f"{_num(value)}{'+' if not step.startswith('-') else ''}{step}x{run}"
                     if step != "0" else f"{_num(value)}x{run}")
        value = value + float(step) * (run + 1)
        n += run + 1
    return " ".join(parts)


def _num(v: float) -> str:
    return repr(round(v, 6)).removesuffix(".0")


@dataclass
class Expr:
    guardian: str
    promql: str
    kind: str  # "family" or "number"


def _selector(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(["m", "k"])
    if rng.random() < 0.3:
        member = rng.choice(MEMBERS)
        return f'{name}{{i="{member}"}}', f'{name}{{i="{member}"}}'
    return name, name


RANGE_FUNCTIONS = ("rate", "increase", "delta", "max_over_time", "min_over_time",
                   "avg_over_time", "sum_over_time", "count_over_time", "last_over_time",
                   "stddev_over_time", "changes", "resets")


def _family(rng: random.Random, depth: int = 0) -> Expr:
    roll = rng.random()
    if depth >= 2 or roll < 0.45:
        g, p = _selector(rng)
        w = rng.choice(WINDOWS)
        which = rng.random()
        if which < 0.15:
            return Expr(g, p, "family")
        if which < 0.25:
            q = rng.choice([0, 0.25, 0.5, 0.9, 1])
            return Expr(f'quantile_over_time({q}, {g}, "{w}")',
                        f"quantile_over_time({q}, {p}[{w}])", "family")
        if which < 0.35:
            t = rng.choice([60, 600, 3600])
            return Expr(f'predict_linear({g}, "{w}", {t})', f"predict_linear({p}[{w}], {t})",
                        "family")
        f = rng.choice(RANGE_FUNCTIONS)
        return Expr(f'{f}({g}, "{w}")', f"{f}({p}[{w}])", "family")
    a = _family(rng, depth + 1)
    if roll < 0.55:
        return Expr(f"abs({a.guardian})", f"abs({a.promql})", "family")
    if roll < 0.65:
        f, c = rng.choice(["clamp_min", "clamp_max"]), rng.choice([0, 1, 2.5, 10])
        return Expr(f"{f}({a.guardian}, {c})", f"{f}({a.promql}, {c})", "family")
    if roll < 0.85:
        op = rng.choice(["+", "-", "*", "/", "%"])
        c = rng.choice([2, 3, -3, 0.5, 7])
        if rng.random() < 0.5 or op in "/%":
            return Expr(f"({a.guardian}) {op} {c}", f"({a.promql}) {op} {c}", "family")
        return Expr(f"{c} {op} ({a.guardian})", f"{c} {op} ({a.promql})", "family")
    b = _family(rng, depth + 1)
    op = rng.choice(["+", "-", "*"])
    return Expr(f"({a.guardian}) {op} ({b.guardian})", f"({a.promql}) {op} ({b.promql})",
                "family")


def _expression(rng: random.Random) -> Expr:
    e = _family(rng)
    if rng.random() < 0.25:
        agg = rng.choice(["sum", "max", "min", "avg", "count"])
        e = Expr(f"{agg}({e.guardian})", f"{agg}({e.promql})", "number")
        if rng.random() < 0.4:
            c = rng.choice([-7, 3, 0.5])
            e = Expr(f"({e.guardian}) % {c}", f"({e.promql}) % {c}", "number")
    return e


@dataclass
class Group:
    series: dict[tuple[str, str], str]  # (name, member) -> notation
    cases: list[tuple[Expr, int]]  # expression, evaluation step


def _groups() -> list[Group]:
    rng = random.Random(SEED)
    groups = []
    for _ in range(GROUPS):
        series = {(n, i): _notation(rng) for n in ("m", "k") for i in MEMBERS
                  if rng.random() < 0.85}
        samples = {k: parse_series(v) for k, v in series.items()}
        full = [t for t in range(6, STEPS) if all(
            t < len(s) and s[t] is not None for s in samples.values())]
        if not full:
            continue
        groups.append(Group(series, [(_expression(rng), rng.choice(full))
                                     for _ in range(CASES_PER_GROUP)]))
    return groups


# -- Prometheus' documented differences, emulated ---------------------------------------

def _extrapolation(fn: str, s: list[tuple[int, float]], change: float, now_ms: int,
                   window_s: float) -> float:
    """What Prometheus 2.x (promql/functions.go extrapolatedRate) makes of ``change``,
    the increase (or delta) between the window's first and last samples ``s``: it
    extrapolates to the window's edges, and divides by the window for rate."""
    is_counter = fn != "delta"
    range_start = now_ms - round(window_s * 1000)
    to_start = (s[0][0] - range_start) / 1000
    to_end = (now_ms - s[-1][0]) / 1000
    sampled = (s[-1][0] - s[0][0]) / 1000
    average = sampled / (len(s) - 1)
    if is_counter and change > 0 and s[0][1] >= 0:
        to_start = min(to_start, sampled * (s[0][1] / change))  # not below zero
    threshold = average * 1.1
    interval = sampled + (to_start if to_start < threshold else average / 2)
    interval += to_end if to_end < threshold else average / 2
    return change * (interval / sampled) / (window_s if fn == "rate" else 1.0)


class PrometheusHistory(History):
    """guardian's history, its rate, increase and delta extrapolated as Prometheus does:
    guardian's own value, times the factor Prometheus applies on the same samples."""

    def query(self, fn: str, name: str, matchers: Any, window: float,
              arg: float = 0.0) -> float | Family | None:
        got = super().query(fn, name, matchers, window, arg)
        if fn not in ("rate", "increase", "delta") or not isinstance(got, dict):
            return got
        rows = self.stores[(name, None)]
        horizon = self.now_ms - round(window * 1000)
        kept = [(t, r) for t, r in zip(rows.times, rows.rows, strict=True) if t > horizon]
        out: Family = {}
        for key, value in got.items():
            i = rows.index[key]
            s = [(t, r[i]) for t, r in kept if i < len(r) and r[i] == r[i]]
            sampled = (s[-1][0] - s[0][0]) / 1000
            change = value * sampled if fn == "rate" else value
            out[key] = _extrapolation(fn, s, change, self.now_ms, window)
        return out


def _empty_is_no_result(agg: Callable[[Family | None], float | None]
                        ) -> Callable[[Family | None], float | None]:
    return lambda v: agg(v) if v else None  # PromQL: an aggregation of nothing is nothing


# -- both sides --------------------------------------------------------------------------

Result = dict[str, float]  # '{i="0"}' -> value ('{}' for a number)


def _labels(key: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in key) + "}"


def _guardian_results(groups: list[Group], monkeypatch: pytest.MonkeyPatch
                      ) -> list[list[Result]]:
    for agg in ("agg_max", "agg_min", "agg_sum", "agg_count", "agg_avg"):
        monkeypatch.setitem(expr_module._GLOBALS, agg,
                            _empty_is_no_result(getattr(runtime, agg)))
    out = []
    for g in groups:
        samples = {k: parse_series(v) for k, v in g.series.items()}
        fns = [compile_subexpression(parse_condition(e.guardian).body, CATALOGUE)
               for e, _ in g.cases]
        history = PrometheusHistory({"m": 3600.0, "k": 3600.0})
        results: list[Result] = [{} for _ in g.cases]
        for step in range(STEPS):
            values: dict[str, Family] = {"m": {}, "k": {}}
            for (name, member), s in samples.items():
                if step < len(s) and s[step] is not None:
                    values[name][(("i", member),)] = float(s[step])  # type: ignore[arg-type]
            history.record(step * 60.0, values)
            for j, (_, at) in enumerate(g.cases):
                if at == step:
                    got = fns[j](values, history)
                    if isinstance(got, dict):
                        results[j] = {_labels(k): v for k, v in got.items()}
                    elif got is not None:
                        results[j] = {"{}": float(got)}
        out.append(results)
    return out


def _promtool_file(groups: list[Group], expected: list[list[Result]]) -> str:
    lines = ["rule_files: [empty.yml]", "evaluation_interval: 1m", "tests:"]
    for g, results in zip(groups, expected, strict=True):
        lines += ["  - interval: 1m", "    input_series:"]
        for (name, member), notation in g.series.items():
            lines += [f"      - series: '{name}{{i=\"{member}\"}}'",
                      f"        values: '{notation}'"]
        lines.append("    promql_expr_test:")
        for (e, at), want in zip(g.cases, results, strict=True):
            lines += [f"      - expr: '{e.promql}'", f"        eval_time: {at}m",
                      "        exp_samples:" + (" []" if not want else "")]
            for labels, v in sorted(want.items()):
                lines += [f"          - labels: '{labels}'", f"            value: {v!r}"]
    return "\n".join(lines) + "\n"


_FAILED = re.compile(r'^\s+expr: "(?P<expr>.*)", time: (?P<time>\S+),\n\s+exp: (?P<exp>.*)\n'
                     r"\s+got: (?P<got>.*)$", re.M)
_SAMPLE = re.compile(r"(\{[^}]*\}) (\S+?)(?:, |$)")


def _parse(text: str) -> Result:
    if text.strip() == "nil":
        return {}
    out = {}
    for labels, value in _SAMPLE.findall(text.strip()):
        kept = ", ".join(p for p in labels[1:-1].split(", ") if p and
                         not p.startswith("__name__="))
        out["{" + kept + "}"] = float(value)
    return out


def _same(a: Result, b: Result, tolerance: float) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or math.isclose(a[k], b[k], rel_tol=tolerance, abs_tol=tolerance)
        for k in a)


def _differences(tmp_path: Path, groups: list[Group], expected: list[list[Result]],
                 tolerance: float) -> list[dict[str, str]]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "diff.yml").write_text(_promtool_file(groups, expected))
    proc = subprocess.run([promtool, "test", "rules", "diff.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    report = proc.stdout + proc.stderr  # promtool prints failures on stderr
    if proc.returncode != 0 and "FAILED" not in report:
        raise AssertionError(report[-3000:])
    return [m.groupdict() for m in _FAILED.finditer(report)
            if not _same(_parse(m["exp"]), _parse(m["got"]), tolerance)]


def test_guardian_and_promtool_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _groups()
    cases = sum(len(g.cases) for g in groups)
    assert cases >= 500
    # promtool compares exactly; a difference in the last bits of a float (a sum taken
    # in another order) is not one of meaning
    differ = _differences(tmp_path, groups, _guardian_results(groups, monkeypatch), 1e-12)
    assert not differ, f"{len(differ)} of {cases} cases differ, e.g. {differ[:5]}"


def test_the_series_notation_gives_promtools_floats_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `9.8-0.1x3` ended at 9.5 here and 9.500000000000002 in promtool, so a rule
    comparing with == fired in one and not the other. Every sample, compared exactly."""
    groups = [Group(g.series, [(Expr(name, name, "family"), step)
                               for name in ("m", "k") for _, step in g.cases])
              for g in _groups()]
    differ = _differences(tmp_path, groups, _guardian_results(groups, monkeypatch), 0.0)
    assert not differ, differ[:5]
