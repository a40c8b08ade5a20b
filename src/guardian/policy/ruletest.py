"""Rule unit tests in TOML, modelled on ``promtool test rules``.

A test file names rule files, an evaluation interval and tests; each test gives input
series in a compact notation and expectations at evaluation times::

    rule_files = ["zombies.toml"]
    interval = "30s"

    [[test]]
    name = "a zombie pile-up fires after 2m"
    [test.series]
    "processes.zombies" = "0 0 300x10"
    'processes.zombies_by_parent{ppid="42", comm="bad"}' = "0 0 300x10"
    [[test.expect]]
    at = "3m"
    firing = ["zombie-pileup"]
    actions = [{ rule = "zombie-pileup", use = "log" }]

Series notation, as promtool's (Prometheus promql/parser generated_parser.y,
series_item; values accumulate as its parser adds them): ``a`` one sample (``+a`` and
``-a`` too); ``a+bxn`` a then n more samples, each b higher; ``a-bxn`` likewise
lower; ``axn`` a repeated n more times; ``_`` a missing sample; ``_xn`` n missing
samples. Sample i is at time i * interval; past the end,
missing.

A family (a labeled signal) is present at every step that its longest series covers;
``_`` in one of its series only removes that member, so a family can be present and empty
(e.g. no zombies at all). Past the end of all its series, the family has no value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_toml
from guardian.core.durations import format_duration
from guardian.core.errors import GuardianError
from guardian.core.snapshot import Snapshot, Value, parse_series_key
from guardian.engine import gate
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.model.testfile import Expectation, RuleTest, RuleTestFile
from guardian.plugin.contract import SampleError, Source
from guardian.plugin.registry import Registry, default_registry
from guardian.policy.loader import load_rules

_TOKEN = re.compile(r"^(?:(_)|([+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?))(?:([+-]\d+(?:\.\d+)?)?x(\d+))?$")
MAX_STEPS = 1_000_000  # evaluations per test: a far `at` is an error, not a hang
MAX_SAMPLES = 2_000_000  # samples all of one test's series expand to (16 MB of floats)


def parse_series(text: str, limit: int = MAX_SAMPLES) -> list[float | None]:
    """Expand the compact series notation, to at most ``limit`` samples. Raises
    ValueError."""
    out: list[float | None] = []
    for tok in text.split():
        m = _TOKEN.match(tok)
        if not m:
            raise ValueError(f"bad series token {tok!r}; expected a, a+bxn, a-bxn, axn, _ "
                             "or _xn")
        missing, start, step, times = m.groups()
        n = int(times) if times is not None else 0
        if n > 100_000:
            raise ValueError(f"series token {tok!r} repeats too often (at most 100000)")
        if len(out) + n + 1 > limit:
            raise ValueError(f"the series expand to more than {MAX_SAMPLES} samples in "
                             f"this test (at {tok!r}); use fewer or shorter series")
        if missing:
            if step:
                raise ValueError(f"a missing sample cannot have a step: {tok!r}")
            out.extend([None] * (n if times is not None else 1))
        else:
            # promtool's parser adds the step once per sample (so 9.8-0.1x3 ends at
            # 9.500000000000002, not 9.5): the same floats as the tool the notation is from
            value, b = float(start), float(step or 0)
            out.append(value)
            for _ in range(n):
                value += b
                out.append(value)
    return out


@dataclass
class Failure:
    test: str
    at: str
    message: str


@dataclass
class FileResult:
    path: str
    tests: int = 0
    failures: list[Failure] = field(default_factory=list)
    errors: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.errors


def run_test_file(path: str | Path, registry: Registry | None = None,
                  source_configs: Mapping[str, BaseModel] | None = None) -> FileResult:
    """Run every test of one test file: ``[[test]]`` tables against its rules, and the
    samples of any source that offers them (``[[kmsg]]``: kernel-log lines), checked by
    that source configured with ``source_configs`` (default: its defaults). Any problem
    with the file is a located error in the result, never an exception."""
    path = Path(path)
    res = FileResult(str(path))
    try:
        _run_file(path, res, registry or default_registry(), source_configs or {})
    except RuleError as exc:
        res.errors.extend(exc.diagnostics)
    return res


def _run_file(path: Path, res: FileResult, reg: Registry,
              source_configs: Mapping[str, BaseModel]) -> None:
    text, doc = read_toml(path, "test file")
    err = Reporter(str(path), text, res.errors)
    samplers = {name: cls for name, cls in sorted(reg.sources.items()) if cls.offers_samples}
    for name, cls in samplers.items():
        if name in doc:
            _check_samples(cls(Host(), source_configs.get(name)), doc[name], res, err)
    rest = {k: v for k, v in doc.items() if k not in samplers}
    if not rest and res.tests:
        return  # a file of source samples only
    try:
        spec = RuleTestFile.model_validate(rest)
    except ValidationError as exc:
        err.validation(exc, (), RuleTestFile, extra_known=list(samplers))
        return
    try:
        ruleset = load_rules([path.parent / f for f in spec.rule_files], reg)
    except RuleError as exc:
        res.errors.extend(exc.diagnostics)
        return
    catalogue = reg.catalogue()
    names = [r.name for r in ruleset.rules]
    for i, test in enumerate(spec.test):
        tname = test.name or f"test {i + 1}"
        try:
            _known_rules(test, names)
            res.tests += 1
            _run_one(test, tname, spec.interval, ruleset, catalogue, res)
        except _TestInputError as exc:
            err(("test", i, *exc.loc), f"{tname}: {exc}", value=exc.at_value)
    if res.tests == 0 and not res.errors:
        err((), "no [[test]] tables or source samples ([[kmsg]]) in this file")


def _known_rules(test: RuleTest, names: list[str]) -> None:
    """Every rule an expectation names is one of the rule files' rules."""
    for j, exp in enumerate(test.expect):
        for key in ("firing", "pending", "needs_human", "validating", "demoted", "step"):
            for k, name in enumerate(getattr(exp, key) or []):
                if name not in names:
                    raise _TestInputError(_no_such_rule(name, names), "expect", j, key,
                                          name if key == "step" else k)
        for key in ("actions", "would"):
            for k, action in enumerate(getattr(exp, key) or []):
                if action.rule not in names:
                    raise _TestInputError(_no_such_rule(action.rule, names),
                                          "expect", j, key, k, "rule")


def _no_such_rule(name: str, names: list[str]) -> str:
    hint = difflib.get_close_matches(name, names, n=1)
    return f"no rule named {name!r} in the rule files" + (
        f" (did you mean {hint[0]!r}?)" if hint else "")


def _check_samples(source: Source[Any], samples: Any, res: FileResult, err: Reporter) -> None:
    """``[[NAME]]`` tables, each one sample for the source NAME to check."""
    name = source.name
    if not isinstance(samples, list) or not all(isinstance(x, dict) for x in samples):
        err((name,), f"`{name}` must be an array of tables: write each as [[{name}]]")
        return
    for i, sample in enumerate(samples):
        try:
            problem = source.check_sample(sample)
        except SampleError as exc:
            err((name, i, *exc.loc), str(exc))
            continue
        res.tests += 1
        if problem is not None:
            res.failures.append(Failure(f"{name} sample {i + 1}", "-", problem))


class _TestInputError(GuardianError, ValueError):
    def __init__(self, msg: str, *loc: str | int, at_value: bool = True) -> None:
        super().__init__(msg)
        self.loc = loc
        self.at_value = at_value


def _run_one(test: RuleTest, tname: str, interval: float, ruleset: Any,
             catalogue: Any, res: FileResult) -> None:
    series: dict[str, tuple[str, Any, list[float | None]]] = {}
    left = MAX_SAMPLES
    for key, notation in test.series.items():
        try:  # the key names the signal ...
            name, labels = parse_series_key(key)
            if name not in catalogue:
                hint = difflib.get_close_matches(name, list(catalogue), n=1)
                raise ValueError(f"unknown signal {name!r}"
                                 + (f" (did you mean {hint[0]!r}?)" if hint else ""))
            if bool(labels) != catalogue[name].is_family:
                raise ValueError(f"signal {name!r} " + (
                    "is a family; give its labels" if catalogue[name].is_family
                    else "has no labels"))
        except ValueError as exc:
            raise _TestInputError(str(exc), "series", key, at_value=False) from None
        try:  # ... and the value its samples
            series[key] = (name, labels, parse_series(str(notation), left))
            left -= len(series[key][2])
        except ValueError as exc:
            raise _TestInputError(str(exc), "series", key) from None
    times: list[tuple[int, Expectation]] = []
    for j, exp in enumerate(test.expect):
        step = exp.at / interval
        if abs(step - round(step)) > 1e-9:
            raise _TestInputError(f"expect.at {format_duration(exp.at)} is not a multiple of "
                                  f"the interval {format_duration(interval)}",
                                  "expect", j, "at")
        if round(step) > MAX_STEPS:
            raise _TestInputError(f"expect.at {format_duration(exp.at)} is {round(step)} "
                                  f"evaluations away at {format_duration(interval)}; at "
                                  f"most {MAX_STEPS} per test", "expect", j, "at")
        times.append((round(step), exp))
    family_len: dict[str, int] = {}
    for name, labels, samples in series.values():
        if labels:
            family_len[name] = max(family_len.get(name, 0), len(samples))
    reboots: set[int] = set()
    for j, when in enumerate(test.reboots):
        step = when / interval
        if abs(step - round(step)) > 1e-9 or round(step) > MAX_STEPS:
            raise _TestInputError(f"reboots: {format_duration(when)} is not a multiple of "
                                  f"the interval {format_duration(interval)} within "
                                  f"{MAX_STEPS} evaluations", "reboots", j)
        reboots.add(round(step))
    engine = Engine(ruleset, boot="boot-0")
    last = max(t for t, _ in times)
    by_step: dict[int, list[Expectation]] = {}
    for t, exp in times:
        by_step.setdefault(t, []).append(exp)
    for step in range(last + 1):
        if step in reboots:  # a new boot: a new engine, with the state the last one saved
            saved = engine.state()
            engine = Engine(ruleset, boot=f"boot-{len([r for r in reboots if r <= step])}")
            engine.restore(saved)
        snap = Snapshot(step * interval)
        for name, length in family_len.items():
            if step < length:
                snap.values[name] = {}
        for name, labels, samples in series.values():
            v = samples[step] if step < len(samples) else None
            if v is None:
                continue
            if labels:
                fam = snap.values.setdefault(name, {})
                assert isinstance(fam, dict)
                fam[labels] = v
            else:
                snap.values[name] = v
        decisions = engine.evaluate(snap)
        for exp in by_step.get(step, []):
            _check(exp, tname, engine, decisions, res, snap.values)


def _check(exp: Expectation, tname: str, engine: Engine, decisions: list[Any],
           res: FileResult, values: dict[str, Value]) -> None:
    at = format_duration(exp.at)
    problems: list[str] = []
    states = engine.states
    for key, want_names, got in (
            ("firing", exp.firing, engine.firing()),
            ("pending", exp.pending, engine.pending()),
            ("needs_human", exp.needs_human, [n for n, s in states.items() if s.escalated]),
            ("validating", exp.validating,
             [n for n, s in states.items() if s.validating is not None]),
            ("demoted", exp.demoted, [n for n, s in states.items() if s.demoted]),
            ("awaiting_approval", exp.awaiting_approval,
             [n for n, s in states.items() if gate.awaits(s)])):
        if want_names is not None:
            want = sorted(want_names)
            if want != sorted(got):
                problems.append(_diff(key, want, sorted(got)))
    for key, want_actions_of, shadow in (("actions", exp.actions, False),
                                         ("would", exp.would, True)):
        if want_actions_of is None:
            continue
        expected = [a.model_dump() for a in want_actions_of]
        want_actions = [_action_line(a) for a in expected]
        got_actions = []
        for d in decisions:
            if (d.mode == "observe") != shadow:
                continue  # a shadow rule's actions are planned, never applied
            for a in d.actions:
                got_actions.append(_action_line({"rule": d.rule, "use": a.use, **a.params},
                                                keys=expected))
        if sorted(want_actions) != sorted(got_actions):
            problems.append(_diff(key, sorted(want_actions), sorted(got_actions)))
    for name, want_step in sorted((exp.step or {}).items()):
        ran = max((d.step for d in decisions if d.rule == name and d.actions
                   and d.kind in ("firing", "retry")), default=0)
        if ran != want_step:
            problems.append(f"    step of {name}: expected {want_step}, got {ran}")
    if problems:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items())
                          if not isinstance(v, dict)) or "(no scalar values)"
        res.failures.append(Failure(tname, at, "\n".join(problems) + f"\n    inputs: {shown}"))


def _action_line(a: dict[str, Any], keys: list[dict[str, Any]] | None = None) -> str:
    """A planned action as text; on the 'got' side only parameters some expectation
    names are shown, so an expectation may name just rule and use."""
    params = {k: v for k, v in a.items() if k not in ("rule", "use")}
    if keys is not None:
        named = {k for e in keys if isinstance(e, dict) for k in e if k not in ("rule", "use")}
        params = {k: v for k, v in params.items() if k in named}
    extra = "".join(f" {k}={v!r}" for k, v in sorted(params.items()))
    return f"{a.get('rule')}: {a.get('use')}{extra}"


def _diff(what: str, want: list[str], got: list[str]) -> str:
    lines = difflib.unified_diff(want, got, "expected", "got", lineterm="", n=len(want) + 1)
    body = "\n".join("      " + ln for ln in list(lines)[2:]) or "      (ordering differs)"
    return f"    {what}: expected {want or '[] (nothing)'}, got {got or '[] (nothing)'}\n{body}"
