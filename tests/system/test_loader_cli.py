"""`guardian check` and `guardian schema` on rule files, through the command line: every
mistake of every file in one run, as text or JSON (the loader itself is
tests/unit/policy/test_loader.py)."""

from __future__ import annotations

import json
from pathlib import Path

from guardian.runtime.schemas import rule_file_schema
from tests.support.checkout import write
from tests.support.cli import guardian
from tests.support.rule_texts import GOOD_RULES


def test_every_mistake_of_every_file_in_one_run(tmp_path: Path) -> None:
    """`guardian check` reports all errors of all files and exits 1."""
    write(tmp_path, "one.toml", '''version = 1

[[rule]]
name = "bad-signal"
summary = "s"
when = "zombies.totl > 5"

[[rule]]
name = "bad-function"
summary = "s"
when = "rat(memcg.dying, '5m') > 1"
for = "5 min"

[[rule]]
name = "bad-args"
summary = "s"
when = "increase(memcg.dying) > 1"
severity = "high"

  [[rule.action]]
  use = "reboot"
''')
    write(tmp_path, "two.toml", 'version = 1\n[[rule]\nname = "x"\n')
    proc = guardian("check", str(tmp_path))
    assert proc.returncode == 1
    lines = [ln.replace(str(tmp_path) + "/", "") for ln in proc.stdout.splitlines()]
    assert [ln.split(": ")[0] for ln in lines] == [
        "one.toml:6:9", "one.toml:11:9", "one.toml:12:7", "one.toml:17:9",
        "one.toml:18:12", "one.toml:21:9", "two.toml:2:7",
    ], lines
    assert "unknown signal 'zombies.totl'" in lines[0]
    assert "unknown function 'rat'; did you mean rate" in lines[1]
    assert "bad duration '5 min'" in lines[2]
    assert "increase() takes 2 arguments, got 1" in lines[3]
    assert "severity: Input should be" in lines[4]
    assert "unknown action 'reboot'" in lines[5]
    assert "TOML syntax" in lines[6]
    assert "7 error(s)" in proc.stderr


def test_check_json_output(tmp_path: Path) -> None:
    p = write(tmp_path, "r.toml", GOOD_RULES.replace("memcg.dying", "memcg.nope"))
    proc = guardian("check", "--json", str(p))
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["ok"] is False
    assert out["errors"][0]["line"] == 6 and out["errors"][0]["col"] == 9


def test_schema_command_prints_a_json_schema() -> None:
    proc = guardian("schema")
    schema = json.loads(proc.stdout)
    assert schema == rule_file_schema()
    rule = schema["$defs"]["Rule"]["properties"]
    assert {"name", "summary", "when", "for", "keep_firing_for", "cooldown", "severity",
            "labels", "enabled", "action", "limit"} <= set(rule)
    assert rule["severity"]["enum"] == ["info", "warning", "critical"]
