"""Ladders in the real service (issue 42): `python -m guardian run` as a process (the
notify socket a datagram socket the test reads, tests/support/daemon.py), its `command`
actions run for real and append to a file, its state file and audit log on disk, its
/metrics scraped over HTTP. Nothing is a stand-in but systemd's notify socket."""

from __future__ import annotations

import itertools
import json
import signal
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.checkout import write
from tests.support.daemon import daemon, free_port
from tests.support.wait import BOUND, wait_until

# always true on a running host (this test's own process counts); three steps, each a
# command appending its number to a file. Step 1's verify leaves the test time to stop the
# service between steps; the others are as short as the loop's interval allows.
LADDER = '''version = 1
[[rule]]
name = "never-resolves"
summary = "a problem no step resolves"
when = "processes.total > 0"
limit = {{ runs = 3, within = "1h" }}
{steps}
  [[rule.escalate]]
  use = "log"
  message = "a human, please"
'''

STEP = '''
  [[rule.step]]
  verify = "{verify}"
  [[rule.step.action]]
  use = "command"
  argv = ["/bin/sh", "-c", "echo {n} >> \\"$0\\"", "{out}"]
'''


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The service's /metrics as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = bytes(resp.read()).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def audit(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_a_three_step_ladder_climbs_once_each_in_order_across_a_restart(
        tmp_path: Path) -> None:
    """Done when (issue 42): a three-step ladder of `command` actions on a problem that
    never resolves runs each step once, in order, each after the previous one's verify,
    across a SIGTERM and start of the service between step 1 and step 2 (same state
    file); past the top it needs a human (its escalate action, once); /metrics says each
    step's outcome (climbed, climbed, needs_human) and no resolve time."""
    out = tmp_path / "steps"
    rules = tmp_path / "rules"
    rules.mkdir()
    steps = "".join(STEP.format(verify=v, n=n, out=out)
                    for n, v in [(1, "4s"), (2, "1s"), (3, "1s")])
    write(rules, "ladder.toml", LADDER.format(steps=steps))

    def lines() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    with daemon(tmp_path, rules=rules) as (proc, notify):
        notify.wait_for("READY", timeout=BOUND)
        wait_until(lambda: lines() == ["1"], "step 1 ran")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=BOUND) == 0
    # stopped between steps: step 2's verify (4 s) had not passed, or it ran too soon
    assert lines() == ["1"]
    saved = json.loads((tmp_path / "state.json").read_text())["rules"]["never-resolves"]
    assert saved["step"] == 1, saved
    port = free_port()
    with daemon(tmp_path, "--metrics-port", str(port), rules=rules) as (proc, notify):
        notify.wait_for("READY", timeout=BOUND)
        wait_until(lambda: any(a.get("kind") == "escalated" for a in audit(tmp_path)),
                   "the ladder's top passed: it needs a human")
        # the restarted service continued at step 2: step 1 never ran again
        assert lines() == ["1", "2", "3"]
        metrics = scrape(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=BOUND) == 0
    decisions = [a for a in audit(tmp_path) if a.get("type") == "decision"]
    said = [(d["kind"], str(d["reason"])) for d in decisions]
    assert said == [
        ("firing", "step 1 of 3: command, verify 4s"),
        ("retry", "step 2 of 3: command, verify 1s; step 1 did not resolve it within 4s"),
        ("retry", "step 3 of 3: command, verify 1s; step 2 did not resolve it within 1s"),
        ("escalated", "needs a human: its 3 steps ran and it still fires 1s after the last")]
    # each after the previous one's verify, by the service's own clock (the decisions'
    # monotonic times, one boot): a lower bound the logic owes, never a claim of speed
    at = [float(str(d["time"])) for d in decisions]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(at)]
    assert [g >= v for g, v in zip(gaps, [4, 1, 1], strict=True)] == [True] * 3, gaps
    # each step's command ran once, each an outcome in the audit log, ok
    ran = [a["outcome"] for a in audit(tmp_path)
           if a.get("type") == "outcome" and a.get("use") == "command"]
    assert [o["ok"] for o in ran] == [True] * 3, ran  # type: ignore[index]
    # the second process saw steps 1 and 2 climbed (step 1's verify passed in it) and the
    # top needing a human; it never resolved: no resolve time observed
    rule = (("rule", "never-resolves"),)

    def outcome(step: str, what: str) -> float | None:
        return metrics.get(("guardian_rule_outcomes_total",
                            tuple(sorted((*rule, ("step", step), ("outcome", what))))))
    assert [outcome("1", "climbed"), outcome("2", "climbed"), outcome("3", "needs_human"),
            outcome("3", "resolved")] == [1.0, 1.0, 1.0, 0.0], {
        k: v for k, v in metrics.items() if k[0].startswith("guardian_rule_")}
    # the histogram's series for a rule appears at its first resolve (not made at zero)
    assert metrics.get(("guardian_rule_resolve_seconds_count", rule), 0.0) == 0.0
