"""What the metrics page carries per rule, and what a scrape costs (issue 44: the page was
458 kB on a node with 80 rules, half of it ``_created`` series and zero counters of
decisions a rule cannot make; each scrape matched every family member against the rules'
selectors again, half of a scrape's CPU there).

Before: every counter child had a ``_created`` twin, and every rule had a
``guardian_decisions_total`` series at zero for each of the 11 kinds, ``validating``,
``demoted`` and ``awaiting_approval`` included where the rule has no ``validate``,
``demote`` or ``approve``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import generate_latest

from guardian import load_text
from guardian.runtime.metrics import Metrics

RULES = '''version = 1
[[rule]]
name = "plain"
summary = "s"
when = "memcg.dying > 100"
  [[rule.action]]
  use = "log"

[[rule]]
name = "gated"
summary = "s"
when = "memcg.dying > 100"
validate = "memcg.dying < 10"
demote = { after = 2, below = "50%" }
approve = { timeout = "2h" }
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]

[[rule]]
name = "ladder"
summary = "s"
when = "memcg.dying > 100"
  [[rule.step]]
  verify = "5m"
    [[rule.step.action]]
    use = "log"
  [[rule.step]]
  verify = "5m"
  approve = { timeout = "2h" }
    [[rule.step.action]]
    use = "command"
    argv = ["/bin/true"]
'''


def _page() -> str:
    metrics = Metrics()
    metrics.use_rules(load_text(RULES), {})
    metrics.tick.observe(0.1)
    return generate_latest(metrics.registry).decode()


def _kinds(page: str, rule: str) -> set[str]:
    return set(re.findall(rf'^guardian_decisions_total\{{kind="([a-z_]+)",rule="{rule}"\}} 0\.0$',
                          page, re.M))


def test_no_created_series() -> None:
    page = _page()
    assert 'guardian_actions_total{action="log",outcome="ok",rule="plain"} 0.0' in page
    assert "guardian_tick_seconds_count 1.0" in page
    assert "_created" not in page


def test_each_rule_starts_at_zero_for_the_decisions_it_can_make() -> None:
    page = _page()
    common = {"pending", "firing", "retry", "resolved", "inactive", "suppressed", "held",
              "escalated"}
    assert _kinds(page, "plain") == common
    assert _kinds(page, "gated") == common | {"validating", "demoted", "awaiting_approval"}
    assert _kinds(page, "ladder") == common | {"awaiting_approval"}  # a step's gate


SELECTING = '''version = 1
[[rule]]
name = "eth0-drops"
summary = "s"
when = 'net.dev.rx_dropped{iface="eth0"} > 100'
'''


def test_a_members_selection_is_decided_once_and_anew_after_a_reload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from guardian.core.snapshot import Snapshot, label
    from guardian.runtime import metrics as metrics_module
    from guardian.sources.net import NetSource

    catalogue = {s.name: s for s in NetSource.specs}
    metrics = Metrics()
    metrics.use_rules(load_text(SELECTING), catalogue)
    family = {label("iface", i): 5.0 for i in ("eth0", "eth1", "lo")}
    metrics.signals.snapshot = Snapshot(15.0, {"net.dev.rx_dropped": family}, checked=True)
    calls = []
    real = metrics_module.matches  # type: ignore[attr-defined]  # (its import)

    def counted(*args: Any) -> bool:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(metrics_module, "matches", counted)
    first = generate_latest(metrics.registry).decode()
    assert len(calls) == 3
    assert 'guardian_signal_net_dev_rx_dropped_total{iface="eth0"} 5.0' in first
    assert 'iface="eth1"' not in first
    generate_latest(metrics.registry)  # the next scrape: the same members
    assert len(calls) == 3
    metrics.use_rules(load_text(SELECTING.replace('"eth0"', '"eth1"')), catalogue)
    after = generate_latest(metrics.registry).decode()
    assert 'guardian_signal_net_dev_rx_dropped_total{iface="eth1"} 5.0' in after
    assert 'iface="eth0"' not in after
