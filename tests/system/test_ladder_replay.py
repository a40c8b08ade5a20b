"""`guardian replay` of a recording shows a ladder (issue 42): the CLI as a process, over
tests/data/healthy.rec (this VM recorded by `guardian record`, 3m at 2s: real snapshots,
no stand-in), a ladder whose condition holds throughout."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.checkout import DATA, write
from tests.support.cli import guardian

LADDER = '''version = 1
[[rule]]
name = "ladder"
summary = "never resolves on this recording"
when = "processes.total > 0"
limit = { runs = 3, within = "1h" }
  [[rule.step]]
  verify = "30s"
  [[rule.step.action]]
  use = "log"
  [[rule.step]]
  verify = "1m"
  [[rule.step.action]]
  use = "memcg.release"
  [[rule.step]]
  verify = "30s"
  [[rule.step.action]]
  use = "kube.event"
  [[rule.escalate]]
  use = "log"
'''


def test_replay_of_a_recording_shows_each_step_and_the_need_of_a_human(
        tmp_path: Path) -> None:
    """Done when (issue 42): replay shows the ladder: each step once, in order, at the
    recording's time its previous step's verify passed, with what it would run; past the
    top, needs a human. The text and --json agree."""
    rules = write(tmp_path, "ladder.toml", LADDER)
    text = guardian("replay", "--rules", str(rules), str(DATA / "healthy.rec"))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].endswith("4 decision(s)"), lines[0]
    # each decision's line: its time, rule, kind, evidence, then (its reason)
    said = [(ln.split()[0], ln.split()[2], re.sub(r".*\((step \d|needs)", r"\1", ln)[:-1])
            for ln in lines if ln.lstrip().startswith("+")]
    assert said == [
        ("+0s", "firing", "step 1 of 3: log, verify 30s"),
        ("+30s", "retry", "step 2 of 3: memcg.release, verify 1m; step 1 did not resolve it "
                          "within 30s"),
        ("+1m30s", "retry", "step 3 of 3: kube.event, verify 30s; step 2 did not resolve it "
                            "within 1m"),
        ("+2m", "escalated", "needs a human: its 3 steps ran and it still fires 30s after "
                             "the last")]
    assert [ln.strip() for ln in lines if "would run" in ln] == [
        "would run: log", "would run: memcg.release", "would run: kube.event",
        "would run: log"]
    out = guardian("replay", "--json", "--rules", str(rules), str(DATA / "healthy.rec"))
    decisions = json.loads(out.stdout)["data"]["decisions"]
    assert [(d["kind"], [a["use"] for a in d["actions"]], d["reason"]) for d in decisions] \
        == [(k, [u], r) for (_, k, r), u in zip(
            said, ["log", "memcg.release", "kube.event", "log"], strict=True)]
