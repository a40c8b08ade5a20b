"""guardian.runtime.preflight: what ``guardian check`` finds beyond each rule file."""

from __future__ import annotations

import pytest

from guardian import load_text
from guardian.runtime.config import Config
from guardian.runtime.preflight import errors, sandbox_warnings

REBOOT = '''version = 1
[[rule]]
name = "kernel-update"
summary = "s"
when = "memcg.dying > 10"
fleet = true
  [[rule.action]]
  use = "node.reboot"
  systemctl = ["/bin/true"]
'''


def test_a_reboot_on_a_kubernetes_node_needs_the_fleet_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    rules = load_text(REBOOT, path="r.toml")
    [d] = errors(rules, Config())  # no [fleet] in the config
    assert (d.path, d.line, d.col) == ("r.toml", rules.rules[0].line, 1)
    assert "node.reboot on a Kubernetes node needs the fleet budget" in d.message


def test_rules_that_neither_reboot_nor_drain_have_nothing_to_check() -> None:
    rules = load_text('version = 1\n[[rule]]\nname = "a"\nsummary = "s"\n'
                      'when = "memcg.dying > 1"\n  [[rule.action]]\n  use = "log"\n')
    assert errors(rules, Config()) == [] and sandbox_warnings(rules) == []
