"""Monitoring guardian itself (deploy/monitoring): the PrometheusRule carries exactly the
plain rule file's groups, the committed PrometheusRule and dashboard are what
``python deploy/monitoring/generate.py`` writes now (run it after changing the rules or
the generator), the dashboard reads back unchanged through grafana-foundation-sdk's own
model, every alert has a unit test, and every metric and label value the alerts and the
dashboard read is one guardian exports. promtool's checks of the same files:
tests/system/test_monitoring_promtool.py."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from types import ModuleType
from typing import Any

import pytest
import yaml

from guardian.runtime.coverage import CHOSEN
from guardian.runtime.metrics import BLIND_CAUSES, OUTCOMES, STATES, Metrics
from tests.support.checkout import REPO

MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "guardian-alerts.rules.yaml"
RULE_TESTS = MONITORING / "guardian-alerts.test.yaml"
DASHBOARD = MONITORING / "guardian-dashboard.json"
COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "alerts"
REGENERATE = "python deploy/monitoring/generate.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guardian_monitoring_generate",
                                                  MONITORING / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs_sdk() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("grafana-foundation-sdk needs Python 3.11 or later")
    if importlib.util.find_spec("grafana_foundation_sdk") is None:
        pytest.skip("grafana-foundation-sdk is not installed (pip install -e '.[test]')")


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


# -- the PrometheusRule and the rule file ------------------------------------------------

def test_the_prometheus_rule_carries_the_rule_files_groups() -> None:
    manifest = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1",
                                                          "PrometheusRule")
    assert manifest["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert component["resources"] == ["prometheusrule.yaml"]


def test_the_committed_prometheus_rule_is_what_the_generator_writes() -> None:
    committed = (COMPONENT / "prometheusrule.yaml").read_text()
    assert committed == _generator().prometheus_rule_text(), f"run `{REGENERATE}`"


def test_every_alert_says_what_to_do_and_has_unit_tests_firing_and_quiet() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    firing = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"]
              if case["exp_alerts"]}
    quiet = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"]
             if not case["exp_alerts"]}
    names = [a["alert"] for a in _alerts()]
    assert len(names) == len(set(names))
    assert set(names) - firing == set(), "alerts without a test where they fire"
    # where a `for` or a threshold decides, a test shows the alert quiet before it
    decided = {a["alert"] for a in _alerts() if "for" in a or ">=" in a["expr"]}
    assert decided - quiet == set(), "alerts without a test where they stay quiet"
    for alert in _alerts():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert {"summary", "description"} <= alert["annotations"].keys(), alert["alert"]


# -- the dashboard -----------------------------------------------------------------------

def test_the_committed_dashboard_is_what_the_generator_writes() -> None:
    _needs_sdk()
    assert DASHBOARD.read_text() == _generator().dashboard_json(), f"run `{REGENERATE}`"


def test_the_dashboard_reads_back_unchanged_through_the_sdk_model() -> None:
    """grafana-foundation-sdk's Dashboard model reads the JSON and writes it again: a key
    it does not know, or a value of the wrong shape, does not come back the same."""
    _needs_sdk()
    generate = _generator()
    model = _dashboard()
    assert generate.round_trip(model) == model
    misspelt = {**model, "panelz": model["panels"]}
    assert generate.round_trip(misspelt) == model  # the unknown key is not read


def test_the_dashboard_has_a_node_variable_and_the_panels_the_operators_need() -> None:
    model = _dashboard()
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["node"]["type"] == "query"
    assert variables["datasource"]["type"] == "datasource"
    exprs = " ".join(_generator().expressions(model))
    for metric in ("guardian_rule_state", "guardian_rules_blind", "guardian_tick_seconds_bucket",
                   "guardian_actions_total", "guardian_source_up", "guardian_persistence_ok",
                   "guardian_rule_needs_human"):
        assert metric in exprs, metric
    assert '=~"$node"' in exprs
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Node $node"]
    sources = {json.dumps(p["datasource"], sort_keys=True) for p in model["panels"]
               if p["type"] != "row"}
    assert sources == {'{"type": "prometheus", "uid": "${datasource}"}'}


# -- what they read is what guardian exports ---------------------------------------------

def _exported() -> set[str]:
    """The sample names guardian's registry exposes (a fresh Metrics, no rules loaded)."""
    names = set()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "info": ("_info",)}
    for family in Metrics().registry.collect():
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names


def _expressions() -> list[tuple[str, str]]:
    return [*((a["alert"], a["expr"]) for a in _alerts()),
            *(("dashboard", e) for e in _generator().expressions(_dashboard()))]


def unknown_reads(exprs: list[tuple[str, str]], exported: set[str]) -> list[str]:
    """Metric names (guardian's and process_*) and values of `state`, `outcome` and
    `cause` that the expressions read and guardian does not export."""
    wrong = []
    for where, expr in exprs:
        for name in re.findall(r"\b((?:guardian|process)_\w+)", expr):
            if name not in exported:
                wrong.append(f"{where}: {name}")
        for label, allowed in (("state", STATES), ("outcome", OUTCOMES),
                               ("cause", BLIND_CAUSES)):
            for m in re.finditer(rf'\b{label}\s*(?:=~|!~|!=|=)\s*"([^"]*)"', expr):
                wrong += [f"{where}: {label}={v}" for v in m[1].split("|")
                          if v not in allowed]
    return wrong


def test_every_metric_and_label_value_read_is_exported() -> None:
    exported = _exported()
    assert {"guardian_rule_state", "guardian_actions_total", "guardian_tick_seconds_bucket",
            "guardian_build_info", "process_start_time_seconds"} <= exported
    assert unknown_reads(_expressions(), exported) == []
    # the check finds a misspelt metric and a state guardian has no word for
    assert unknown_reads([("x", 'guardian_rule_sate{state="blind"} == 1')], exported) == [
        "x: guardian_rule_sate", "x: state=blind"]
    assert unknown_reads([("x", 'guardian_rule_blind{cause!~"unconfgured"}')], exported) == [
        "x: cause=unconfgured"]


def test_the_blind_alert_leaves_out_exactly_the_operators_choices() -> None:
    """Before: GuardianRuleBlind read guardian_rule_state{state="unknown"} and fired for
    each of the 11 rules whose source a default DaemonSet configures nothing for (8 DCGM
    rules, script-check-problem, health-probe-down, kubelet-unhealthy), on every node,
    forever. Its promtool tests show an unconfigured and a disabled rule staying quiet."""
    alert = next(a for a in _alerts() if a["alert"] == "GuardianRuleBlind")
    [left_out] = re.findall(r'guardian_rule_blind\{cause!~"([^"]+)"\}', alert["expr"])
    assert set(left_out.split("|")) == CHOSEN
    assert "guardian_rule_state" not in alert["expr"]
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    quiet_causes = {m for t in tests for s in t.get("input_series", [])
                    if "guardian_rule_blind{" in s["series"]
                    for m in re.findall(r'cause="([^"]+)"', s["series"])}
    assert quiet_causes >= CHOSEN


def test_the_fleet_budget_alert_names_the_action_the_executor_counts() -> None:
    """A refusal by the fleet budget is counted as the action "(fleet budget)"."""
    executor = (REPO / "src" / "guardian" / "runtime" / "executor.py").read_text()
    alert = next(a for a in _alerts() if a["alert"] == "GuardianFleetBudgetExhausted")
    action = re.findall(r'action="([^"]+)"', alert["expr"])
    assert set(action) == {"(fleet budget)"}
    assert 'Executed(d, "(fleet budget)"' in executor

