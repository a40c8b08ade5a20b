"""Property-based fuzzing (hypothesis) of everything that parses untrusted text: the rule
loader, the condition compiler, TOML positions, rule-test series, and every /proc, /sys,
kmsg and systemctl parser. Garbage ends in a clean error (ValueError and kin), never
another exception or a hang."""

from __future__ import annotations

import contextlib
import os
import string

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.positions import key_positions
from guardian.core.snapshot import SignalSpec, labels_of, parse_series_key
from guardian.engine.history import History
from guardian.hostio.ethtool import parse_gstats, parse_gstrings
from guardian.hostio.infiniband import parse_counter, parse_rate, parse_state, parse_word
from guardian.hostio.irq import parse_cpu_list
from guardian.hostio.kernelstats import (
    parse_net_dev,
    parse_pressure,
    parse_proc_stat_cpus,
    parse_softirqs,
    parse_softnet_stat,
)
from guardian.hostio.kmsg import parse_record
from guardian.hostio.procfs import parse_proc_stat
from guardian.hostio.systemctl import parse_show
from guardian.policy.expr import ExprError, compile_condition
from guardian.policy.loader import load_text
from guardian.policy.ruletest import parse_series

# GUARDIAN_FUZZ_EXAMPLES raises the count for a longer hunt than CI's
FUZZ = settings(max_examples=int(os.environ.get("GUARDIAN_FUZZ_EXAMPLES", "300")),
                deadline=2000, suppress_health_check=[HealthCheck.too_slow])
CAT = {s.name: s for s in (SignalSpec("a.x", ""), SignalSpec("a.y", ""),
                           SignalSpec("c.core", "", labels=("cpu",)))}
CLEAN = (ValueError, LookupError, UnicodeError)

TOKENS = st.sampled_from([
    "a.x", "a.y", "c.core", 'c.core{cpu="1"}', 'c.core{cpu="*"}', "1", "0", "2.5", "1e9",
    "+", "-", "*", "/", "%", ">", "<", ">=", "==", "!=", "and", "or", "not", "(", ")", ",",
    "max(", "min(", "sum(", "avg(", "count(", "abs(", "absent(", 'rate(', 'increase(',
    'delta(', '"5m"', '"0s"', "max_over_time(", "{", "}", "=", "[", "]", "lambda", ":",
])


@FUZZ
@given(st.text(max_size=200))
def test_conditions_from_any_text(text: str) -> None:
    with contextlib.suppress(ExprError):
        compile_condition(text, CAT)


@FUZZ
@given(st.lists(TOKENS, max_size=25), st.floats(allow_nan=True), st.floats(),
       st.dictionaries(st.sampled_from("0123"), st.floats(), max_size=4))
def test_conditions_from_tokens_compile_and_evaluate(tokens: list[str], x: float, y: float,
                                                     core: dict[str, float]) -> None:
    try:
        cond = compile_condition(" ".join(tokens), CAT)
    except ExprError:
        return
    hist = History(cond.windows)
    values = {"a.x": x, "a.y": y, "c.core": {labels_of({"cpu": k}): v for k, v in
                                             core.items()}}
    for t in (0.0, 30.0, 60.0):
        hist.record(t, values)
        result = cond.fn(values, hist)
        assert result is None or isinstance(result, bool | dict)


@FUZZ
@given(st.text(max_size=400))
def test_rule_files_from_any_text(text: str) -> None:
    try:
        load_text(text)
    except RuleError as exc:
        assert all(d.line >= 1 and d.col >= 1 for d in exc.diagnostics)


TOML_KEYS = st.text(alphabet=string.ascii_letters + string.digits + "_-. \"'", min_size=1,
                    max_size=8)
TOML_VALUES = st.recursive(
    st.one_of(st.integers(), st.text(max_size=20), st.booleans(), st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(TOML_KEYS, inner, max_size=3)),
    max_leaves=10)


@FUZZ
@given(st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=5),
       st.lists(st.dictionaries(TOML_KEYS, TOML_VALUES, max_size=4), max_size=3))
def test_positions_of_any_valid_toml(top: dict[str, object], rules: list[dict[str, object]]
                                     ) -> None:
    doc = dict(top)
    doc["rule"] = rules
    text = tomli_w.dumps(doc)
    positions = key_positions(text)
    lines = text.split("\n")
    for key in top:
        pos = positions[(key,)]
        assert 1 <= pos.line <= len(lines)
    for i in range(len(rules)):
        assert ("rule", i) in positions


@FUZZ
@given(st.text(max_size=300))
def test_text_parsers(text: str) -> None:
    for parse in (parse_proc_stat, parse_proc_stat_cpus, parse_softirqs, parse_softnet_stat,
                  parse_net_dev, parse_pressure, parse_show, parse_series,
                  parse_duration, parse_series_key, parse_cpu_list):
        with contextlib.suppress(*CLEAN):
            parse(text)


@FUZZ
@given(st.binary(max_size=600))
def test_binary_parsers(raw: bytes) -> None:
    for parse in (parse_record, parse_gstrings, parse_gstats):
        try:
            parse(raw)
        except (*CLEAN, __import__("struct").error):
            pass


@FUZZ
@given(st.binary(max_size=300))
def test_infiniband_attributes_are_a_value_or_none(raw: bytes) -> None:
    """A /sys/class/infiniband attribute of any bytes is a value or no value (None), never
    an exception: the fabric source reads hundreds of them a tick."""
    for parse in (parse_counter, parse_state, parse_rate, parse_word):
        parse(raw)


@FUZZ
@given(st.integers(min_value=0, max_value=10**7), st.sampled_from("RSDZTXI"),
       st.text(max_size=40), st.lists(st.integers(min_value=0, max_value=2**64),
                                      min_size=0, max_size=50))
def test_proc_stat_with_any_comm(pid: int, state: str, comm: str, rest: list[int]) -> None:
    text = f"{pid} ({comm}) {state} " + " ".join(map(str, rest))
    try:
        st_ = parse_proc_stat(text)
    except CLEAN:
        assert len(rest) < 20
        return
    assert st_.comm == comm and st_.pid == pid and st_.state == state


# -- the rule-test file loader -----------------------------------------------------------

_ANY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False),
              st.sampled_from(["1m", "0", "100000w", "10x3", "_x2 1", "hot", "log", "",
                               "memcg.dying", 'cpu.core.sys_pct{cpu="0"}', "r.toml"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(
                                ["at", "firing", "pending", "actions", "rule", "use",
                                 "firng", "name", "series", "expect", "level"]),
                                inner, max_size=4)),
    max_leaves=12)
_TEST_FILE = st.fixed_dictionaries({}, optional={
    "rule_files": st.one_of(st.just(["r.toml"]), _ANY),
    "interval": st.one_of(st.sampled_from(["1m", "1s", "100ms", "0s"]), _ANY),
    "test": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
        "name": _ANY, "series": st.one_of(st.dictionaries(st.sampled_from(
            ["memcg.dying", 'cpu.core.sys_pct{cpu="0"}', "nope", "memcg.dying{x=\"1\"}"]),
            st.one_of(st.sampled_from(["10x3", "_x2 1", "1+1", "0 _ 5"]), _ANY), max_size=3),
            _ANY),
        "expect": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
            "at": st.one_of(st.sampled_from(["0", "1m", "90s", "100000w"]), _ANY),
            "firing": _ANY, "pending": _ANY, "actions": _ANY}), max_size=3), _ANY),
        "input_series": _ANY}), max_size=3), _ANY),
    "kmsg": _ANY,
})


@settings(max_examples=int(os.environ.get("GUARDIAN_FUZZ_EXAMPLES", "300")), deadline=5000,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_TEST_FILE)
def test_rule_test_files_from_any_structure(tmp_path_factory: object, doc: dict[str, object]
                                            ) -> None:
    """Any shape of rule-test file: a result with located errors or test outcomes, never
    an exception (before: `firing = [1]`, `actions = ["log"]` or `series` as a string
    raised)."""
    import tempfile
    from pathlib import Path

    from guardian.policy.ruletest import run_test_file

    def clean(v: object) -> object:  # TOML has no null
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [clean(x) for x in v if x is not None]
        return v

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "r.toml").write_text('version = 1\n[[rule]]\nname = "hot"\nsummary = "s"\n'
                                       'when = "memcg.dying > 5"\n')
        f = Path(tmp, "t.test.toml")
        f.write_text(tomli_w.dumps(clean(doc)))  # type: ignore[arg-type]
        res = run_test_file(f)
        assert all(d.line >= 1 and d.col >= 1 for d in res.errors)
        assert res.ok or res.errors or res.failures
