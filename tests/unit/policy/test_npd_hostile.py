"""Issue 39, round 4: hostile node-problem-detector JSON given to `guardian import npd`.
Before: tracebacks (a number where a string goes, a NUL in a path, deep nesting, a
duration too long), TOML that `guardian check` refused (a reason too long for a rule
name, two reasons with one slug, a regex Python's re refuses or that backtracks, a
condition type with a space, a message with ``$rule``). Now: every malformed input is an
error at its place in the file (``path:line:col``), and whatever is imported passes
`guardian check` (the importer checks it before writing: cli/npd.py ``problems``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardian.cli.npd import problems
from guardian.policy.npd import NpdConfigError, import_npd

CUSTOM = {"plugin": "custom", "source": "own",
          "pluginConfig": {"invoke_interval": "30s", "timeout": "5s"},
          "conditions": [{"type": "DiskBad", "reason": "DiskOK", "message": "ok"}],
          "rules": [{"type": "permanent", "condition": "DiskBad", "reason": "DiskFull",
                     "path": "/bin/true"},
                    {"type": "temporary", "reason": "DiskSlow", "path": "/bin/true"}]}


def _write(tmp_path: Path, text: str | bytes) -> Path:
    f = tmp_path / "config" / "own.json"
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return f


def _refused(f: Path) -> tuple[int, int, str]:
    with pytest.raises(NpdConfigError) as got:
        import_npd(f)
    m = re.match(rf"{re.escape(str(f))}:(\d+):(\d+): (.*)", str(got.value))
    assert m, str(got.value)
    return int(m.group(1)), int(m.group(2)), m.group(3)


def _with(**changes: Any) -> str:
    """CUSTOM, one key per line, with ``rules[1]``'s or pluginConfig's keys changed."""
    data = json.loads(json.dumps(CUSTOM))
    for key, value in changes.items():
        where, _, name = key.partition("__")
        target = data["pluginConfig"] if where == "g" else data["rules"][1] \
            if where == "r1" else data
        target[name] = value
    return json.dumps(data, indent=1)


@pytest.mark.parametrize("key,value,says", [
    ("r1__timeout", 5, "must be a string"),
    ("r1__timeout", "5 parsecs", "not a duration"),
    ("r1__timeout", "9" * 30 + "h", "longer than ten years"),
    ("r1__timeout", "1ns", "shortest"),
    ("r1__path", "/bin/tr\0ue", "NUL"),
    ("r1__path", ["/bin/true"], "must be a string"),
    ("r1__args", "--flag", "must be an array"),
    ("r1__type", "sometimes", "\"temporary\" or \"permanent\""),
    ("r1__reason", {"x": 1}, "must be a string"),
    ("g__concurrency", 1000, "out of range"),
    ("g__concurrency", 1e400, "whole number"),
    ("g__max_output_length", True, "whole number"),
    ("g__skip_initial_status", "yes", "must be a boolean"),
    ("__rules", "all", "must be an array"),
    ("__pluginConfig", [], "must be an object"),
], ids=lambda v: repr(v)[:40])
def test_a_value_of_the_wrong_type_or_range_is_an_error_at_its_key(
        tmp_path: Path, key: str, value: Any, says: str) -> None:
    text = _with(**{key: value})
    line, col, message = _refused(_write(tmp_path, text))
    name = key.partition("__")[2]
    # the key's own place: its last mention (rules[1] is the file's last object, and
    # pluginConfig's keys and the top's are mentioned once)
    i = text.rindex(f'"{name}":')
    assert (line, col) == (text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)), message
    assert says in message


@pytest.mark.parametrize("text,where,says", [
    ('{"plugin": "custom",\n "rules": [\n', (3, 1), "not JSON"),
    ('{"plugin": "custom", "rules": [}', (1, 32), "not JSON"),
    ("[1, 2]", (1, 1), "must be a JSON object"),
    ('{"plugin":\n "x' + "\\ud800" + '"}', (1, 2), "plugin"),
    pytest.param('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", (1, 70), "nested",
                 id="nested-100000"),
    (b'{"plugin": "custom",\n "source": "\xff"}', (2, 13), "not UTF-8"),
    ('{"plugin": "custom", "conditions": [{"type": "Kernel Deadlock"}], "rules": ['
     '{"type": "permanent", "condition": "Kernel Deadlock", "path": "/bin/true"}]}',
     (1, 99), "condition type"),
    ('{"plugin": "kmsg", "rules": [{"reason": "A", "pattern": "(a+)+$"}]}', (1, 46),
     "backtrack"),
    ('{"plugin": "kmsg", "rules": [{"reason": "A", "pattern": "[[:alpha:]]+"}]}', (1, 46),
     "RE2"),
    ('{"plugin": "kmsg", "rules": [{"reason": "A", "pattern": "\\\\pL"}]}', (1, 46),
     "bad regular expression"),
    ('{"plugin": "kmsg", "rules": [{"reason": "A"}]}', (1, 30), "no pattern"),
    ('{"plugin": "journald", "rules": []}', (1, 2), "journald"),
    ('{"plugin": "custom",\n "source": "\\udc00"}', (2, 2), "surrogate"),
], ids=lambda v: repr(v)[:40])
def test_malformed_input_is_an_error_located_in_it(
        tmp_path: Path, text: str | bytes, where: tuple[int, int], says: str) -> None:
    line, col, message = _refused(_write(tmp_path, text))
    assert (line, col) == where, message
    assert says in message


def test_a_fifo_is_refused_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "own.json"
    os.mkfifo(fifo)
    with pytest.raises(NpdConfigError, match="not a regular file"):
        import_npd(fifo)


def test_what_check_used_to_refuse_is_written_so_that_it_passes(tmp_path: Path) -> None:
    """A reason too long for a rule name, reasons sharing a slug (one rule name twice), a
    source with quotes and newlines, a message that would be a template, a default
    condition's reason with a space, a kmsg pattern needing TOML escapes."""
    long = "Disk" + "Full" * 60
    data = {"plugin": "custom", "source": 'own"\n]\n[x]\n# \u2028',
            "conditions": [{"type": "DiskBad", "reason": "disk ok", "message": "$rule \\"}],
            "rules": [{"type": "permanent", "condition": "DiskBad", "reason": long,
                       "path": "/bin/true", "args": ["a'b\"c\n", "\u0085"]},
                      {"reason": "AB", "path": "/bin/true", "timeout": ".5s"},
                      {"reason": "Ab", "path": "/bin/true"}]}
    got = import_npd(_write(tmp_path, json.dumps(data)))
    assert problems(got) == []
    kmsg = {"plugin": "kmsg", "source": "'''\"\"\"",
            "conditions": [{"type": "Wedged", "reason": "NotWedged"}],
            "rules": [{"reason": "A", "pattern": "it's \\d+ \"wedged\" '''"},
                      {"reason": "a", "pattern": "x\ty"},
                      {"type": "permanent", "condition": "Wedged", "reason": "A",
                       "pattern": "z"},
                      {"type": "permanent", "condition": "Wedged", "reason": "a-",
                       "pattern": "z"}]}
    got = import_npd(_write(tmp_path, json.dumps(kmsg)))
    assert problems(got) == []


# -- fuzz: any JSON shape, and NPD-shaped objects with hostile values ----------------------

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 10**6),
                    st.floats(allow_nan=False), st.text(max_size=12))
_any = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3),
                                                 st.dictionaries(st.text(max_size=6), c,
                                                                 max_size=3)),
                    max_leaves=8)
_text = st.one_of(st.text(max_size=20), st.sampled_from(
    ["30s", "1m30s", ".5s", "0", "1ns", "-1s", "Disk full", "a\"b'\n", "$rule", "x" * 200,
     "DiskBad", "temporary", "permanent", "/bin/true", "./config/plugin/x.sh", "x\ud800",
     "a\x00b", "\u2028\x85\x7f"]))
_value = st.one_of(_text, _scalar, _any)
_pattern = st.sampled_from(["oops", r"a\d+b", "(a+)+$", "[[:alpha:]]", r"\pL", "(?i)x",
                            "(?P<a>x)", r"(x)\1", "[", "it's \"q\"", ""])


@st.composite
def _npd(draw: st.DrawFn) -> Any:
    plugin = draw(st.sampled_from(["custom", "kmsg", "custom", "journald", 7]))
    rule = st.fixed_dictionaries({}, optional={
        "type": st.one_of(st.sampled_from(["temporary", "permanent"]), _value),
        "reason": _value, "condition": st.one_of(st.just("DiskBad"), _value),
        "path": st.one_of(st.just("/bin/true"), _value), "args": _value,
        "timeout": _value, "invoke_interval": _value,
        "pattern": st.one_of(_pattern, _value)})
    return draw(st.fixed_dictionaries({"plugin": st.just(plugin)}, optional={
        "source": _value,
        "pluginConfig": st.one_of(st.fixed_dictionaries({}, optional={
            "timeout": _value, "invoke_interval": _value, "concurrency": _value,
            "max_output_length": _value, "skip_initial_status": _value}), _value),
        "conditions": st.one_of(st.lists(st.fixed_dictionaries(
            {"type": st.one_of(st.just("DiskBad"), _value)},
            optional={"reason": _value, "message": _value}), max_size=2), _value),
        "rules": st.one_of(st.lists(rule, max_size=3), _value)}))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.one_of(_npd(), _any))
def test_fuzz_any_json_is_an_error_located_in_it_or_output_that_checks(
        tmp_path: Path, data: Any) -> None:
    f = _write(tmp_path, json.dumps(data, indent=1))
    try:
        got = import_npd(f)
    except NpdConfigError as exc:
        assert re.match(rf"{re.escape(str(f))}:\d+:\d+: ", str(exc)), str(exc)
        return
    assert problems(got) == [], (data, got.config, got.rules)
