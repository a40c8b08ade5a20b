"""Rule phases and decision kinds are Literal types that list every kind the engine emits
and every phase a rule is in (that a misspelled one is a type error:
tests/system/test_typing.py)."""

from __future__ import annotations

from typing import get_args, get_type_hints

from guardian import Engine, Snapshot, load_text
from guardian.engine.decision import Decision
from guardian.engine.lifecycle import RuleState
from guardian.model.holds import Hold
from guardian.model.kinds import ENGINE_KINDS, PHASES, DecisionKind, EngineKind, Phase
from guardian.plugin.contract import ActionContext
from guardian.runtime.metrics import KINDS
from guardian.runtime.state import rule_state


def test_every_kind_the_engine_emits_is_an_engine_kind() -> None:
    """One rule goes through every kind (a second, paused, is held; a third validates;
    the first, escalated, is demoted; a fourth awaits approval);
    the metrics count
    each kind, and the decision, context and state fields are typed with these types."""
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "x is high"
when = "memcg.dying > 10"
for = "30s"
cooldown = "0s"
limit = { runs = 2, within = "1h" }
demote = { after = 1, below = "50%" }
  [[rule.action]]
  use = "log"
  [[rule.escalate]]
  use = "log"

[[rule]]
name = "paused"
summary = "x is high, paused"
when = "memcg.dying > 10"
  [[rule.action]]
  use = "log"

[[rule]]
name = "gated"
summary = "x is high, its clean-up gated by a validation that fails"
when = "memcg.dying > 10"
validate = "memcg.dying < 0"

[[rule]]
name = "asks"
summary = "x is high, its command waits for a human's approval"
when = "memcg.dying > 10"
approve = { timeout = "1h" }
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]
''')
    engine = Engine(rules)
    holds = [Hold(1000.0, "maintenance", "alice", rule="paused")]
    seen: list[str] = []
    for t, x in [(0, 50), (10, 1), (20, 50), (50, 50), (60, 50), (70, 50), (80, 1)]:
        seen += [d.kind for d in engine.evaluate(Snapshot(float(t), {"memcg.dying": x}),
                                                 holds=holds)]
    assert set(seen) == set(ENGINE_KINDS) == set(get_args(EngineKind)), seen
    assert set(ENGINE_KINDS) < set(get_args(DecisionKind))
    assert set(KINDS) == set(ENGINE_KINDS)
    assert get_type_hints(Decision)["kind"] == DecisionKind
    assert get_type_hints(ActionContext)["kind"] == DecisionKind
    assert get_type_hints(RuleState)["phase"] == Phase


def test_every_phase_is_one_a_saved_state_may_hold() -> None:
    assert set(PHASES) == set(get_args(Phase)) == {"inactive", "pending", "firing"}
    for phase in PHASES:
        assert rule_state({"phase": phase, "since": 0.0}).phase == phase
