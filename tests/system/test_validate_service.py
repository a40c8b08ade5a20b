"""A validation gate in the real service (issue 42): `python -m guardian run` as a
process, its script checks real programs in node-problem-detector's protocol (exit 0 OK,
1 a problem), its kube.cordon and its clean-up through lightkube over HTTP against the
Kubernetes API stand-in (tests/support/kube_standin.py: a stand-in, whose fidelity kubectl
checks in test_kube_standin.py; what this test uses of it is a Node's GET and its JSON
merge PATCH of spec.unschedulable and metadata.annotations, with the resourceVersion a
precondition (409 Conflict otherwise), as the API concepts' "Patch" and "Conflicts" say),
its /metrics scraped over HTTP. systemd's notify socket is a datagram socket the test
reads (tests/support/daemon.py)."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.checkout import write
from tests.support.daemon import daemon, free_port
from tests.support.kube_standin import kubeconfig, serve
from tests.support.wait import BOUND, wait_until

# a check that says a problem (exit 1, its message on stdout) while its file exists
CHECK = '''
[sources.script.checks.{name}]
argv = ["/bin/sh", "-c", "if [ -e \\"$0\\" ]; then echo {name} failing; exit 1; fi", "{flag}"]
interval = "1s"
timeout = "10s"
'''

RULE = '''version = 1
[[rule]]
name = "sick-gpu"
summary = "the GPU is sick"
when = 'script.problem{{check="fault"}} == 1'
validate = 'script.problem{{check="validate"}} == 0'
fleet = true
  [[rule.action]]
  use = "kube.cordon"
  on = "both"
  kubeconfig = "{kubeconfig}"
  node = "node-a"
'''


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The service's /metrics as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = bytes(resp.read()).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def decisions(tmp_path: Path) -> list[tuple[str, str]]:
    audit = tmp_path / "audit.jsonl"
    lines = audit.read_text().splitlines() if audit.exists() else []
    return [(a["kind"], a["reason"]) for a in map(json.loads, lines)
            if a.get("type") == "decision"]


def test_a_cordon_stays_while_its_validation_fails_and_goes_once_it_passes(
        tmp_path: Path) -> None:
    """Done when (issue 42): a cordon whose validation script fails stays cordoned after
    its problem cleared and says why (a `validating` decision: the check, its value, the
    clean-up waits; guardian_rule_validating 1; its fleet slot stays taken), and is
    uncordoned (the slot given back) once the script passes; then /metrics has one
    resolve time and one `resolved` outcome of step 1."""
    fault, failing = tmp_path / "fault", tmp_path / "validate-fails"
    fault.touch()
    failing.touch()
    rule = (("rule", "sick-gpu"),)
    port = free_port()
    with serve() as (url, store):
        store.add_node("node-a")
        kc = kubeconfig(tmp_path, url)
        config = write(tmp_path, "guardian.toml",
                       f'[fleet]\nkubeconfig = "{kc}"\nnode = "node-a"\nmax_nodes = 1\n'
                       + CHECK.format(name="fault", flag=fault)
                       + CHECK.format(name="validate", flag=failing))

        def node() -> dict[str, Any]:
            return store.objects["nodes"][("", "node-a")]

        def holder() -> str | None:
            lease = store.objects.get("leases", {}).get(("kube-system", "guardian-slot-0"))
            return lease["spec"].get("holderIdentity") if lease else None

        rules = tmp_path / "rules"
        rules.mkdir()
        write(rules, "gpu.toml", RULE.format(kubeconfig=kc))
        with daemon(tmp_path, "--config", str(config), "--metrics-port", str(port),
                    rules=rules) as (proc, notify):
            notify.wait_for("READY", timeout=BOUND)
            wait_until(lambda: node()["spec"].get("unschedulable") is True, "the cordon")
            fault.unlink()  # the problem clears; the validation still fails
            said = wait_until(lambda: [r for k, r in decisions(tmp_path)
                                       if k == "validating"], "a validating decision")
            assert said == ['validation failing: `script.problem{check="validate"} == 0` '
                            '(script.problem{check="validate"} 1); the clean-up waits'], said
            assert scrape(port)[("guardian_rule_validating", rule)] == 1.0
            # ticks go on; the node stays cordoned while the check fails
            for _ in range(3):
                notify.wait_for("STATUS", timeout=BOUND)
            assert node()["spec"]["unschedulable"] is True
            assert holder() == "node-a"  # the fleet slot stays taken while it validates
            assert [k for k, _ in decisions(tmp_path)] == ["firing", "validating"]
            failing.unlink()  # the validation passes: the clean-up runs
            wait_until(lambda: node()["spec"].get("unschedulable") is False, "the uncordon")
            assert "guardian.io/owned" not in node()["metadata"].get("annotations", {})
            wait_until(lambda: holder() is None, "the fleet slot given back")
            metrics = scrape(port)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=BOUND) == 0
    # validate_for is 0: the first tick it holds resolves it (no "holds" decision between)
    assert decisions(tmp_path)[1:] == [
        ("validating", 'validation failing: `script.problem{check="validate"} == 0` '
                       '(script.problem{check="validate"} 1); the clean-up waits'),
        ("resolved", 'validated: `script.problem{check="validate"} == 0` held')]
    assert metrics[("guardian_rule_validating", rule)] == 0.0
    assert metrics[("guardian_rule_resolve_seconds_count", rule)] == 1.0
    assert metrics[("guardian_rule_outcomes_total",
                    (("outcome", "resolved"), *rule, ("step", "1")))] == 1.0
