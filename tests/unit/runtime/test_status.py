"""guardian.runtime.status: a rule's status in words (``run --once``, ``explain``)."""

from __future__ import annotations

from guardian import load_text
from guardian.engine.lifecycle import RuleState
from guardian.model.ruleset import CompiledRule
from guardian.runtime.status import not_acting, state_words


def _rule(enabled: bool = True) -> CompiledRule:
    rules = load_text(f'''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
for = "60s"
cooldown = "5m"
enabled = {str(enabled).lower()}
''')
    return rules.rules[0]


def test_not_acting_says_when_a_pending_rule_fires() -> None:
    st = RuleState(phase="pending", since=100.0)
    assert not_acting(_rule(), st, 115.0) == \
        "pending: fires after holding for 60s (45s left), then:"
    assert "(0s left)" in not_acting(_rule(), st, 500.0)


def test_not_acting_of_a_firing_rule_and_of_one_about_to_fire() -> None:
    assert not_acting(_rule(), RuleState(phase="firing", since=1.0), 2.0).startswith(
        "firing: no action now (cooldown, limit or budget")
    assert not_acting(_rule(), RuleState(), 2.0) == "would fire, then:"


def test_state_words_of_each_phase() -> None:
    rule = _rule()
    assert state_words(_rule(enabled=False), RuleState(), 0.0, [], []) == "disabled"
    assert state_words(rule, RuleState(unknown=True), 0.0, ["memcg.dying"], []) == (
        "UNKNOWN: the condition has no value (missing: memcg.dying); it neither fires "
        "nor clears")
    assert state_words(rule, RuleState(phase="pending", since=100.0), 110.0, [], []) == \
        "PENDING: holds since 10s; fires in 50s (for = 60s)"
    firing = RuleState(phase="firing", since=100.0, last_run=200.0)
    assert state_words(rule, firing, 260.0, [], [("cause", "firing")]) == (
        "FIRING since 160s; actions again in 240s (cooldown); its disruptive actions are "
        "held while its cause cause is firing")
    assert state_words(rule, RuleState(), 0.0, [], []) == \
        "INACTIVE: the condition does not hold"
