"""Rule files: every mistake is reported as path:line:col, all of them in one pass
(`guardian check` on them: tests/system/test_loader_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.policy.loader import load_rules
from tests.support.checkout import RULES, write
from tests.support.rule_texts import GOOD_RULES


def errors(tmp_path: Path, text: str, name: str = "r.toml") -> list[str]:
    p = write(tmp_path, name, text)
    with pytest.raises(RuleError) as info:
        load_rules([p])
    return [str(d).replace(str(tmp_path) + "/", "") for d in info.value.diagnostics]


def test_shipped_rules_load() -> None:
    rs = load_rules([RULES])
    assert {"dying-memcgs", "zombie-pileup", "nic-reset", "core-system-saturated"} <= {
        r.name for r in rs.rules}
    assert all(not f.endswith(".test.toml") for f in rs.files)


def test_toml_syntax_error_has_position(tmp_path: Path) -> None:
    assert errors(tmp_path, 'version = 1\n[[rule]]\nname = "x\n') == [
        "r.toml:3:10: TOML syntax: Illegal character '\\n'"]


@pytest.mark.parametrize(("body", "expected"), [
    ('severity = "urgent"',
     "r.toml:7:12: severity: Input should be 'info', 'warning' or 'critical'"),
    ('fro = "5m"', "r.toml:7:1: unknown key 'fro' (did you mean 'for'?)"),
    ('for = "5 minutes"', "r.toml:7:7: for: bad duration '5 minutes'"),
    ('cooldown = -3', "r.toml:7:12: cooldown: a duration cannot be negative: -3"),
    ('limit = { runs = 0, within = "1h" }',
     "r.toml:7:18: limit.runs: Input should be greater than 0"),
    ('labels = { team = 3 }', "r.toml:7:19: labels.team: Input should be a valid string"),
])
def test_schema_errors_point_at_the_value(tmp_path: Path, body: str, expected: str) -> None:
    text = GOOD_RULES + body + "\n"
    got = errors(tmp_path, text)
    assert len(got) == 1
    assert got[0].startswith(expected), got


def test_missing_required_key_points_at_the_table(tmp_path: Path) -> None:
    got = errors(tmp_path, 'version = 1\n\n[[rule]]\nname = "x"\nwhen = "memcg.dying > 1"\n')
    assert got == ["r.toml:3:1: missing required key 'summary'"]


def test_condition_errors_point_into_the_expression(tmp_path: Path) -> None:
    text = GOOD_RULES.replace('when = "memcg.dying > 1"', 'when = "memcg.dyin > 1"')
    [got] = errors(tmp_path, text)
    assert got.startswith(
        "r.toml:6:9: in `when`: unknown signal 'memcg.dyin'; did you mean memcg.dying")


def test_multiline_condition_error_line(tmp_path: Path) -> None:
    text = GOOD_RULES.replace('when = "memcg.dying > 1"',
                        "when = '''\nmemcg.dying > 1\n  and rate(memcg.live, \"1x\") > 0\n'''")
    assert errors(tmp_path, text) == ["r.toml:8:24: in `when`: bad duration '1x'; expected "
                                      'a number with a unit (ms, s, m, h, d, w), e.g. "90s", '
                                      '"5m", "1h30m"']


def test_unknown_action_and_bad_params(tmp_path: Path) -> None:
    text = GOOD_RULES + '''
  [[rule.action]]
  use = "logg"

  [[rule.action]]
  use = "log"
  level = "loud"
  colour = "red"
'''
    got = errors(tmp_path, text)
    assert got[0].startswith("r.toml:9:9: unknown action 'logg'; did you mean log?")
    assert got[1].startswith("r.toml:13:11: action 'log': level: Input should be 'debug'")
    assert got[2] == "r.toml:14:3: action 'log': unknown key 'colour' (known keys: message, level)"


def test_wrong_version_and_unknown_top_level_key(tmp_path: Path) -> None:
    got = errors(tmp_path, 'version = 2\nrules = []\n')
    assert got == [
        "r.toml:1:11: unsupported schema version 2; this guardian reads version 1",
        "r.toml:2:1: unknown key 'rules' (did you mean 'rule'?)",
    ]


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", GOOD_RULES)
    write(tmp_path, "b.toml", GOOD_RULES)
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path])
    [d] = info.value.diagnostics
    assert d.path.endswith("b.toml") and (d.line, d.col) == (3, 1)
    assert "duplicate rule name 'ok' (first defined at" in d.message
    assert "a.toml:3:1" in d.message


def test_nothing_is_half_loaded(tmp_path: Path) -> None:
    write(tmp_path, "good.toml", GOOD_RULES)
    write(tmp_path, "bad.toml", GOOD_RULES.replace('"ok"', '"other"').replace("> 1", "> "))
    with pytest.raises(RuleError):
        load_rules([tmp_path])


def test_action_parameter_errors_have_positions(tmp_path: Path) -> None:
    text = GOOD_RULES + '''
  [[rule.action]]
  use = "reap.zombies"
  ladder = [{ signal = "SIGFOO", wait = "2s" }]
  min_zombies = "many"

  [[rule.action]]
  use = "systemd.unit"
  verbs = ["kill"]

  [[rule.action]]
  use = "command"
  argv = "rm -rf /"
'''
    got = errors(tmp_path, text)
    assert got[0].startswith("r.toml:10:24: action 'reap.zombies': ladder.0.signal: Input "
                             "should be 'SIGCHLD'")
    assert got[1].startswith("r.toml:11:17: action 'reap.zombies': min_zombies: Input "
                             "should be a valid integer")
    assert got[2] == "r.toml:13:3: action 'systemd.unit': missing required key 'allow'"
    # no such systemd.unit verb (stop, disable, mask, reset-failed, restart, ...)
    assert got[3].startswith("r.toml:15:12: action 'systemd.unit': verbs.0: Input should be")
    assert got[4].startswith("r.toml:19:10: action 'command': argv: Input should be a valid "
                             "list")
    assert len(got) == 5
