"""Validation gates (issue 42): a rule with `validate` keeps its clean-up (the uncordon)
until the validation has held for `validate_for`; while it fails or has no value the
node stays as the remedy left it and a `validating` decision says why; not validated
within `validate_within`, it needs a human. Time is the snapshots' own."""

from __future__ import annotations

from guardian import Engine, Snapshot, load_text
from guardian.core.snapshot import Value

GATED = '''version = 1

[[rule]]
name = "bad-gpu"
summary = "x is high"
when = "memcg.dying > 10"
validate = "processes.total < 100"
validate_for = "2m"
validate_within = "30m"

  [[rule.action]]
  use = "log"
  message = "cordon"

  [[rule.action]]
  use = "log"
  message = "uncordon"
  on = "resolve"

  [[rule.escalate]]
  use = "log"
  message = "human"
'''


def run(e: Engine, t: int, dying: float, total: float | None
        ) -> list[tuple[str, str, str]]:
    values: dict[str, Value] = {"memcg.dying": dying}
    if total is not None:
        values["processes.total"] = total
    return [(d.kind, ",".join(a.params["message"] for a in d.actions), d.reason)
            for d in e.evaluate(Snapshot(float(t), values))]


def test_the_clean_up_waits_until_the_validation_held_for_validate_for() -> None:
    e = Engine(load_text(GATED))
    assert run(e, 0, 50, 500) == [("firing", "cordon", "")]
    # the rule stops firing; the check fails: no uncordon, and it says why
    assert run(e, 60, 1, 500) == [(
        "validating", "", "validation failing: `processes.total < 100` "
        "(processes.total 500 processes); the clean-up waits")]
    assert e.states["bad-gpu"].validating == 60.0
    assert run(e, 120, 1, 400) == []  # still failing: said once
    assert run(e, 180, 1, None) == [(
        "validating", "", "validation has no value: `processes.total < 100` "
        "(processes.total: no value); the clean-up waits")]
    assert run(e, 240, 1, 50) == [(
        "validating", "", "validating: `processes.total < 100` holds; the clean-up runs "
        "once it held for 2m")]
    assert run(e, 300, 1, 50) == []
    # held for 2m (since 240): the uncordon runs, and the episode ends
    assert run(e, 360, 1, 50) == [
        ("resolved", "uncordon", "validated: `processes.total < 100` held for 2m")]
    st = e.states["bad-gpu"]
    assert (st.validating, st.resolutions, st.resolve_times) == (None, 1, [360.0])


def test_not_validated_within_validate_within_needs_a_human() -> None:
    e = Engine(load_text(GATED))
    run(e, 0, 50, 500)
    run(e, 60, 1, 500)
    assert run(e, 60 + 1799, 1, 500) == []
    assert run(e, 60 + 1800, 1, 500) == [(
        "escalated", "human", "needs a human: not validated within 30m after it stopped "
        "firing; validation failing: `processes.total < 100` (processes.total 500 processes); "
        "the clean-up waits")]
    assert e.states["bad-gpu"].escalated


def test_firing_again_while_validating_continues_the_episode() -> None:
    e = Engine(load_text(GATED.replace('name = "bad-gpu"', 'name = "bad-gpu"\n'
                                       'cooldown = "0s"')))
    run(e, 0, 50, 500)
    run(e, 60, 1, 500)
    assert run(e, 120, 50, 500) == [("firing", "cordon", "")]
    st = e.states["bad-gpu"]
    assert (st.validating, st.fires, st.fired_at) == (None, 1, 0.0)


def test_a_gated_rule_removed_while_validating_runs_its_clean_up() -> None:
    e = Engine(load_text(GATED))
    run(e, 0, 50, 500)
    run(e, 60, 1, 500)
    e.replace_rules(load_text(GATED.replace('"bad-gpu"', '"other"')))
    kinds = [(d.rule, d.kind, [a.params["message"] for a in d.actions])
             for d in e.evaluate(Snapshot(120.0, {"memcg.dying": 1.0}))]
    assert ("bad-gpu", "resolved", ["uncordon"]) in kinds


def test_validate_is_checked_as_a_condition() -> None:
    import pytest

    from guardian.core.diagnostics import RuleError
    with pytest.raises(RuleError, match=r"<text>:7:13: in `validate`: unknown signal"):
        load_text(GATED.replace("processes.total < 100", "nope.total < 100"))
    with pytest.raises(RuleError, match="`validate_for` without `validate`"):
        load_text(GATED.replace('validate = "processes.total < 100"\n', ""))
