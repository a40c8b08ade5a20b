"""A failing validation over a family says the values that made it fail (issue 42):
`script.problem{check="diag"} == 0` leaves no member when the check says a problem, and
its `validating` decision said only "(no member)", never the check's 1."""

from __future__ import annotations

from guardian import Engine, Snapshot, load_text
from guardian.core.snapshot import Value

GATED = '''version = 1

[[rule]]
name = "bad-gpu"
summary = "x is high"
when = "memcg.dying > 10"
validate = 'script.problem{check="diag"} == 0'

  [[rule.action]]
  use = "log"
  message = "uncordon"
  on = "resolve"
'''


def test_a_failing_family_validation_says_the_members_values() -> None:
    e = Engine(load_text(GATED))
    problem: dict[tuple[tuple[str, str], ...], float] = {
        (("check", "diag"), ("message", "diag failed")): 1.0,
        (("check", "other"), ("message", "")): 0.0}
    values: dict[str, Value] = {"memcg.dying": 50.0, "script.problem": problem}
    assert [d.kind for d in e.evaluate(Snapshot(0.0, values))] == ["firing"]
    values["memcg.dying"] = 1.0
    [d] = e.evaluate(Snapshot(60.0, values))
    assert (d.kind, d.reason) == (
        "validating", 'validation failing: `script.problem{check="diag"} == 0` '
        '(script.problem{check="diag"} 1); the clean-up waits')
    problem[(("check", "diag"), ("message", "diag failed"))] = 0.0
    assert [(d.kind, d.reason) for d in e.evaluate(Snapshot(120.0, values))] == [
        ("resolved", 'validated: `script.problem{check="diag"} == 0` held')]
