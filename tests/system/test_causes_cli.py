"""`guardian check` on rules whose causes (`caused_by`) name no rule, name the rule
itself or go round in a cycle: each a located error (holding by causes:
tests/unit/engine/test_causes.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.checkout import write
from tests.support.cli import guardian


def test_unknown_causes_and_cycles_are_located_errors(tmp_path: Path) -> None:
    rules = write(tmp_path, "r.toml", '''version = 1
[[rule]]
name = "a"
summary = "s"
when = "memcg.dying > 1"
caused_by = ["b"]

[[rule]]
name = "b"
summary = "s"
when = "memcg.dying > 2"
caused_by = ["a"]

[[rule]]
name = "c"
summary = "s"
when = "memcg.dying > 3"
caused_by = ["dying-memcg", "c"]
''')
    proc = guardian("check", str(rules))
    out = proc.stdout
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "r.toml:6:13: caused_by: causes go round in a cycle: a → b → a" in out
    assert "r.toml:12:13: caused_by: causes go round in a cycle: b → a → b" in out
    assert "r.toml:18:13: caused_by: no rule named 'dying-memcg'" in out
    assert "r.toml:18:13: caused_by: a rule cannot cause itself" in out
