"""`guardian test` through the command line: a failed expectation is a diff, and one bad
test file does not stop the others (rule tests themselves:
tests/unit/policy/test_ruletest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.checkout import write
from tests.support.cli import guardian
from tests.support.rule_texts import HOT_RULE_TEST, HOT_RULES, ZOMBIE_RULES


def test_wrong_expectation_fails_with_a_diff(tmp_path: Path) -> None:
    write(tmp_path, "z.toml", ZOMBIE_RULES)
    t = write(tmp_path, "z.test.toml", '''rule_files = ["z.toml"]
interval = "1m"
[[test]]
name = "wrong on purpose"
[test.series]
"processes.zombies" = "50x5"
  [[test.expect]]
  at = "1m"
  firing = ["many-zombies"]
''')
    proc = guardian("test", str(t))
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout and "'wrong on purpose' at 1m" in proc.stdout
    assert "firing: expected ['many-zombies'], got [] (nothing)" in proc.stdout
    assert "-many-zombies" in proc.stdout  # the diff line
    assert "1 test(s), 1 problem(s)" in proc.stdout


def test_one_bad_file_does_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text(HOT_RULES)
    (tmp_path / "a.test.toml").write_text(HOT_RULE_TEST.replace('  firing = ["hot"]',
                                                                "  firing = [1]"))
    (tmp_path / "b.test.toml").write_text(HOT_RULE_TEST)
    proc = guardian("test", str(tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    assert f"PASS {tmp_path / 'b.test.toml'}" in proc.stdout
    assert f"FAIL {tmp_path / 'a.test.toml'}" in proc.stdout
