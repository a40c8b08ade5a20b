"""The service's recent snapshots for evidence bundles (issue 44): kept only while a loaded
rule can make a bundle (an ``evidence.profile`` action), and compactly.

Before: every service kept its last 15 minutes of whole snapshots whatever its rules; on
the p5.48xlarge-shaped node (bench/p5.py), with no shipped rule using evidence.profile,
that was 0.8 MiB a tick, the RSS climbing from 58 MiB towards 105 MiB."""

from __future__ import annotations

from guardian import load_text
from guardian.core.snapshot import Snapshot, label
from guardian.runtime.evidencebundle import RecentSignals

PLAIN = '''version = 1
[[rule]]
name = "plain"
summary = "s"
when = "memcg.dying > 100"
  [[rule.action]]
  use = "log"
'''

ESCALATES_TO_EVIDENCE = PLAIN + '''
  [[rule.escalate]]
  use = "evidence.profile"
'''


def _snap(t: float) -> Snapshot:
    return Snapshot(t, {"memcg.dying": 3.0 * t,
                        "cpu.core.sys_pct": {label("cpu", str(c)): c + t for c in range(4)}},
                    {"gpu": "no driver"}, checked=True)


def _recent() -> RecentSignals:
    return RecentSignals(None, 15.0)  # type: ignore[arg-type]  # (no bundle written here)


def test_nothing_is_kept_without_a_rule_that_makes_a_bundle() -> None:
    recent = _recent()
    recent.follow(load_text(PLAIN))
    recent.add(_snap(15.0))
    assert recent.snapshots() == []


def test_kept_snapshots_read_back_as_they_were_added() -> None:
    recent = _recent()
    recent.follow(load_text(ESCALATES_TO_EVIDENCE))  # the escalation's action counts
    for t in (15.0, 30.0, 45.0):
        recent.add(_snap(t))
    assert recent.snapshots() == [_snap(15.0), _snap(30.0), _snap(45.0)]
    # the label sets are kept once while they stay the same
    first, last = recent._kept[0].values[1][1], recent._kept[-1].values[1][1]
    assert isinstance(first, tuple) and isinstance(last, tuple) and first[0] is last[0]


def test_a_reload_without_such_a_rule_drops_what_was_kept() -> None:
    recent = _recent()
    recent.follow(load_text(ESCALATES_TO_EVIDENCE))
    recent.add(_snap(15.0))
    recent.follow(load_text(PLAIN))
    recent.add(_snap(30.0))
    assert recent.snapshots() == []
    recent.follow(load_text(ESCALATES_TO_EVIDENCE))
    recent.add(_snap(45.0))
    assert recent.snapshots() == [_snap(45.0)]


def test_a_manual_act_keeps_its_moment() -> None:
    # guardian act makes its bundle from one snapshot, with no ruleset to follow
    recent = _recent()
    recent.add(_snap(15.0))
    assert recent.snapshots() == [_snap(15.0)]
