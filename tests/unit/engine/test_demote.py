"""Learning, opt-in (issue 42): a rule whose remedy does not work here (`demote = { after,
below }`: too few of its attempts resolved without a human) is demoted to shadow mode
from its next episode, durably, until the rule changes. Time is the snapshots' own."""

from __future__ import annotations

import json
from pathlib import Path

from guardian import Engine, Snapshot, load_text
from guardian.engine import outcomes
from guardian.runtime import state as state_file
from guardian.runtime.metrics import Metrics
from guardian.runtime.operate import Operations
from guardian.runtime.why import links

RULE = '''version = 1

[[rule]]
name = "useless"
summary = "x is high"
when = "memcg.dying > 10"
cooldown = "0s"
limit = {{ runs = 50, within = "1h" }}
demote = {{ after = 2, below = "50%" }}
  [[rule.step]]
  verify = "5m"
  [[rule.step.action]]
  use = "log"
  message = "{message}"

  [[rule.action]]
  use = "log"
  on = "resolve"
  message = "clean-up"
'''


def engine(message: str = "fix") -> Engine:
    return Engine(load_text(RULE.format(message=message)))


def episode(e: Engine, t: int, fixed: bool) -> list[tuple[int, str, str, str]]:
    """Fires at ``t``; resolves a minute later (``fixed``), or after its step's verify
    (it escalated: needs a human). (time, kind, mode, actions) of every decision."""
    out: list[tuple[int, str, str, str]] = []
    xs = [(t, 50.0), (t + 60, 1.0)] if fixed else [(t, 50.0), (t + 300, 50.0),
                                                     (t + 360, 1.0)]
    for when, x in xs:
        for d in e.evaluate(Snapshot(float(when), {"memcg.dying": x})):
            out.append((when, d.kind, d.mode, ",".join(a.use for a in d.actions)))
    return out


def test_a_remedy_that_never_works_is_demoted_from_its_next_episode_said_once() -> None:
    e = engine()
    assert ("demoted" not in [k for _, k, _, _ in episode(e, 0, fixed=False)])
    second = episode(e, 1000, fixed=False)
    demoted = [d for d in second if d[1] == "demoted"]
    assert demoted == [(1300, "demoted", "act", "")]
    # the episode under way ends as it began: its clean-up acts
    assert (1360, "resolved", "act", "log") in second
    st = e.states["useless"]
    assert st.demoted.startswith("demoted to observe: its remedy resolved it 0 of 2 times")
    third = episode(e, 2000, fixed=False)
    assert {m for _, k, m, _ in third} == {"observe"}
    assert "demoted" not in [k for _, k, _, _ in third]  # said once
    assert (st := e.states["useless"]).tried == 2  # shadow episodes are no attempts
    assert "demoted to observe" in outcomes.words(st, ladder=True)


def test_a_remedy_that_works_is_never_demoted() -> None:
    e = engine()
    for t in (0, 1000, 2000, 3000):
        got = episode(e, t, fixed=True)
        assert {m for _, _, m, _ in got} == {"act"}
    assert (e.states["useless"].tried, e.states["useless"].worked) == (4, 4)


def test_the_demotion_survives_a_restart_and_a_changed_rule_lifts_it() -> None:
    e = engine()
    episode(e, 0, fixed=False)
    episode(e, 1000, fixed=False)
    clock = state_file.Clock(monotonic=lambda: 5000.0, wall=lambda: 2e9, boot=lambda: "b")
    raw = json.loads(json.dumps(state_file.encode(e.state(), clock)))
    again = engine()
    again.restore(state_file.decode(raw, Path("state.json"), clock))
    assert {m for _, _, m, _ in episode(again, 2000, fixed=True)} == {"observe"}
    changed = engine(message="a better fix")  # a restart with the rule changed
    changed.restore(state_file.decode(raw, Path("state.json"), clock))
    assert changed.states["useless"].demoted == ""
    assert {m for _, _, m, _ in episode(changed, 2000, fixed=True)} == {"act"}
    again.replace_rules(changed.ruleset)  # a reload with the rule changed
    assert again.states["useless"].demoted == ""
    assert (again.states["useless"].tried, again.states["useless"].worked) == (0, 0)


def test_why_shows_a_demoted_rule_in_shadow_mode_and_the_metric_says_it(tmp_path: Path
                                                                        ) -> None:
    e = engine()
    episode(e, 0, fixed=False)
    episode(e, 1000, fixed=False)
    decisions = e.evaluate(Snapshot(2000.0, {"memcg.dying": 50.0}))
    (link,) = links(e, Snapshot(2000.0, {"memcg.dying": 50.0}), decisions)
    assert link.mode == "observe" and "demoted to observe" in link.record
    metrics = Metrics()
    Operations.after(None, e, metrics)  # type: ignore[arg-type]
    assert metrics.registry.get_sample_value("guardian_rule_demoted",
                                             {"rule": "useless"}) == 1.0
