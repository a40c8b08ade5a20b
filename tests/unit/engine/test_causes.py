"""Rules that know their causes (`caused_by`): while a cause is pending or firing, the
symptom's disruptive actions are held (a `held` decision says by what) and its log,
condition and event actions still run; when the cause resolves and the symptom still
holds, the held actions run at once. Unknown causes and cycles are located errors
(tests/system/test_causes_cli.py)."""

from __future__ import annotations

from collections.abc import Sequence

from guardian import Engine, Snapshot, load_text
from guardian.engine.decision import Decision

CHAIN = '''version = 1
[[rule]]
name = "dying-memcgs"
summary = "the cause"
when = "memcg.dying > 100"
cooldown = "10m"
  [[rule.action]]
  use = "log"

[[rule]]
name = "core-hot"
summary = "the symptom"
when = "cpu.hottest_core_pct > 90"
cooldown = "10m"
{caused_by}
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]
'''


def _run(text: str, series: Sequence[tuple[float, float, float]]) -> list[Decision]:
    engine = Engine(load_text(text))
    out = []
    for t, dying, hot in series:
        out += engine.evaluate(Snapshot(t, {"memcg.dying": dying,
                                            "cpu.hottest_core_pct": hot}))
    return out


SERIES = [(0, 500, 99), (60, 500, 99), (120, 10, 99), (180, 10, 99)]


def _lines(decisions: list[Decision]) -> list[tuple[float, str, str, list[str]]]:
    return [(d.time, d.rule, d.kind, [a.use for a in d.actions]) for d in decisions]


def test_a_symptom_holds_its_disruptive_actions_while_its_cause_is_active() -> None:
    held = _run(CHAIN.format(caused_by='caused_by = ["dying-memcgs"]'), SERIES)
    assert _lines(held) == [
        (0, "dying-memcgs", "firing", ["log"]),
        (0, "core-hot", "firing", ["log"]),  # non-disruptive: runs
        (0, "core-hot", "held", []),
        (120, "dying-memcgs", "resolved", []),
        (120, "core-hot", "retry", ["log", "command"]),  # the cause resolved: at once
    ]
    reason = next(d.reason for d in held if d.kind == "held")
    assert reason.startswith("command held while its cause dying-memcgs is firing")
    # the same rules without the cause: every link acts on its own
    free = _run(CHAIN.format(caused_by=""), SERIES)
    assert _lines(free) == [
        (0, "dying-memcgs", "firing", ["log"]),
        (0, "core-hot", "firing", ["log", "command"]),
        (120, "dying-memcgs", "resolved", []),
    ]


def test_holding_is_deterministic_and_survives_a_restart() -> None:
    text = CHAIN.format(caused_by='caused_by = ["dying-memcgs"]')
    first = [d.to_dict() for d in _run(text, SERIES)]
    assert first == [d.to_dict() for d in _run(text, SERIES)]
    engine = Engine(load_text(text))
    engine.evaluate(Snapshot(0, {"memcg.dying": 500.0, "cpu.hottest_core_pct": 99.0}))
    saved = engine.state()
    again = Engine(load_text(text))
    again.restore(saved)
    assert again.states["core-hot"].held
    out = again.evaluate(Snapshot(60, {"memcg.dying": 10.0, "cpu.hottest_core_pct": 99.0}))
    assert [(d.rule, d.kind, [a.use for a in d.actions]) for d in out] == [
        ("dying-memcgs", "resolved", []), ("core-hot", "retry", ["log", "command"])]
