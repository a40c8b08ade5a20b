"""Rule phases and decision kinds are Literal types: a misspelled kind is a type error,
and the types list every kind the engine emits and every phase a rule is in."""

from __future__ import annotations

from pathlib import Path
from typing import get_args, get_type_hints

from mypy import api

from guardian import Engine, Snapshot, load_text
from guardian.engine.decision import Decision
from guardian.engine.lifecycle import RuleState
from guardian.model.holds import Hold
from guardian.model.kinds import ENGINE_KINDS, PHASES, DecisionKind, EngineKind, Phase
from guardian.plugin.contract import ActionContext
from guardian.runtime.metrics import KINDS
from guardian.runtime.state import SavedRule

SNIPPET = '''
from guardian.engine.decision import Decision
from guardian.engine.lifecycle import RuleState
from guardian.plugin.contract import ActionContext


def over(d: Decision) -> bool:
    return d.kind == "{kind}"


def acting(ctx: ActionContext) -> bool:
    return ctx.kind != "{kind}"


def on(st: RuleState) -> bool:
    return st.phase == "{phase}"


def new(d: Decision) -> Decision:
    return Decision(d.time, d.rule, "{kind}", d.severity, d.summary)
'''


def _mypy(tmp_path: Path, kind: str, phase: str) -> tuple[str, int]:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET.format(kind=kind, phase=phase))
    out, err, rc = api.run(["--strict", "--python-version", "3.10", "--no-error-summary",
                            "--cache-dir", str(tmp_path / "cache"), str(path)])
    return out + err, rc


def test_mypy_strict_catches_a_misspelled_kind_or_phase(tmp_path: Path) -> None:
    out, rc = _mypy(tmp_path, "resolved", "firing")
    assert rc == 0, out
    out, rc = _mypy(tmp_path, "resovled", "fiering")
    assert rc == 1
    assert out.count("[comparison-overlap]") == 3, out
    assert out.count("[arg-type]") == 1, out


def test_every_kind_the_engine_emits_is_an_engine_kind() -> None:
    """One rule goes through every kind (a second, paused, is held); the metrics count
    each kind, and the decision, context and state fields are typed with these types."""
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "x is high"
when = "memcg.dying > 10"
for = "30s"
cooldown = "0s"
limit = { runs = 2, within = "1h" }
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
''')
    engine = Engine(rules)
    engine.holds = [Hold(1000.0, "maintenance", "alice", rule="paused")]
    seen: list[str] = []
    for t, x in [(0, 50), (10, 1), (20, 50), (50, 50), (60, 50), (70, 50), (80, 1)]:
        seen += [d.kind for d in engine.evaluate(Snapshot(float(t), {"memcg.dying": x}))]
    assert set(seen) == set(ENGINE_KINDS) == set(get_args(EngineKind)), seen
    assert set(ENGINE_KINDS) < set(get_args(DecisionKind))
    assert set(KINDS) == set(ENGINE_KINDS)
    assert get_type_hints(Decision)["kind"] == DecisionKind
    assert get_type_hints(ActionContext)["kind"] == DecisionKind
    assert get_type_hints(RuleState)["phase"] == Phase


def test_every_phase_is_one_a_saved_state_may_hold() -> None:
    assert set(PHASES) == set(get_args(Phase)) == {"inactive", "pending", "firing"}
    for phase in PHASES:
        assert SavedRule.model_validate({"phase": phase, "since": 0.0}).phase == phase
