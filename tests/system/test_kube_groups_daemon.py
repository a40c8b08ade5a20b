"""Node groups and the breaker through the daemon's own wiring (issue 45): `python -m
guardian run` as a process, with [fleet], [fleet.breaker] and a shadow [[group]] that this
node's labels put it in, against the Kubernetes API stand-in (tests/support/kube_standin.py:
what this test uses of it is a Node's GET and JSON merge PATCH of its annotations and
spec.unschedulable, Leases' GET and LIST, as the API concepts' "Patch" and "Conflicts"
say; kubectl checks its fidelity in test_kube_standin.py). The service's loop tells the
breaker what holds (Operations.tell: guardian.io/firing published on the node) and its
executor judges the node's group from the labels the breaker's reader read off the Node:
the fleet rule's cordon is planned and audited as would_act, never applied."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.support.checkout import write
from tests.support.daemon import daemon
from tests.support.kube_standin import kubeconfig, serve
from tests.support.wait import BOUND, wait_until

RULE = '''version = 1
[[rule]]
name = "nic-stall"
summary = "s"
when = "processes.total > 0"
fleet = true
cooldown = "1s"
limit = {{ runs = 1000, within = "1h" }}
  [[rule.action]]
  use = "log"
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
'''
CONFIG = '''[fleet]
kubeconfig = "{kc}"
node = "node-a"
max_nodes = 1

[fleet.breaker]
every = "1s"

[[group]]
name = "canary"
labels = {{ "guardian.io/canary" = "true" }}
mode = "shadow"
'''
SHADOW = "node group canary is in shadow mode"


def _audit(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_the_daemon_tells_the_breaker_and_runs_a_shadow_group_in_shadow(
        tmp_path: Path) -> None:
    with serve() as (url, store):
        store.add_node("node-a", {"guardian.io/canary": "true",
                                  "kubernetes.io/hostname": "node-a"})
        kc = kubeconfig(tmp_path, url)
        config = write(tmp_path, "guardian.toml", CONFIG.format(kc=kc))
        rules = tmp_path / "rules"
        rules.mkdir()
        write(rules, "nic.toml", RULE.format(kc=kc))
        cordoned: list[bool] = []

        def node() -> dict[str, Any]:
            n: dict[str, Any] = store.objects["nodes"][("", "node-a")]
            cordoned.append(bool(n["spec"].get("unschedulable")))
            return n

        with daemon(tmp_path, "--config", str(config), rules=rules) as (proc, notify):
            notify.wait_for("READY", timeout=BOUND)
            # the loop told the breaker's reader, which published it on the node
            firing = wait_until(lambda: node()["metadata"].get("annotations", {}).get(
                "guardian.io/firing"), "guardian.io/firing published")
            assert list(json.loads(firing)) == ["nic-stall"]
            # once the labels are read, a run is judged in the node's group: shadow
            wait_until(lambda: any(r.get("type") == "decision" and SHADOW in r["reason"]
                                   for r in _audit(tmp_path)),
                       "a decision in the canary group's shadow mode")
            node()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=BOUND) == 0
    records = _audit(tmp_path)
    shadowed = [i for i, r in enumerate(records)
                if r.get("type") == "decision" and SHADOW in r["reason"]]
    assert all(records[i]["mode"] == "observe" for i in shadowed)
    # each of its actions planned as would_act, right after it
    first = shadowed[0]
    assert [(r["use"], r.get("would_act")) for r in records[first + 1:first + 3]] == [
        ("log", True), ("kube.cordon", True)]
    # never cordoned: no cordon applied, refused or seen on the node at any read
    assert not any(r.get("use") == "kube.cordon" and r.get("type") != "plan"
                   for r in records)
    assert not any(r.get("type") == "plan" and r.get("use") == "kube.cordon"
                   and not r.get("would_act") for r in records)
    assert cordoned and not any(cordoned)
