"""The alerts on guardian itself and its dashboard against Prometheus' own tools: `promtool
check rules` accepts the rule file and the PrometheusRule as kustomize renders the
component, `promtool test rules` runs every alert's unit tests, and every PromQL expression
of the dashboard parses (promtool has no expression checker: each is wrapped in a
recording rule of a throwaway rule file). The cheap checks of the same files:
tests/unit/test_monitoring.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.checkout import REPO

MONITORING = REPO / "deploy" / "monitoring"
COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "alerts"
# Grafana's variables, replaced by what Grafana puts there
GRAFANA = {"$node": ".+", "$__rate_interval": "1m"}


def _promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_promtool_accepts_the_rule_file() -> None:
    proc = _promtool("check", "rules", "guardian-alerts.rules.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 13 rules found" in proc.stdout


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    proc = _promtool("test", "rules", "guardian-alerts.test.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_component_renders_a_prometheus_rule_promtool_accepts(tmp_path: Path) -> None:
    """An overlay that takes the component, rendered by kubectl's kustomize; the groups
    it gives the Prometheus Operator, checked as a rule file."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "components": [os.path.relpath(COMPONENT, tmp_path)]}))
    proc = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [rule] = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["namespace"] == "guardian"
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = _promtool("check", "rules", "rendered.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 13 rules found" in checked.stdout


def _check_exprs(tmp_path: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:
    rules = []
    for i, expr in enumerate(exprs):
        for variable, value in GRAFANA.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:expr_{i}", "expr": expr})
    (tmp_path / "exprs.yaml").write_text(yaml.safe_dump({"groups": [
        {"name": "dashboard", "rules": rules}]}))
    return _promtool("check", "rules", "exprs.yaml", cwd=tmp_path)


def test_every_dashboard_expression_is_promql(tmp_path: Path) -> None:
    model = json.loads((MONITORING / "guardian-dashboard.json").read_text())
    exprs: list[str] = []

    def walk(panels: list[dict[str, object]]) -> None:
        for p in panels:
            targets = p.get("targets", [])
            assert isinstance(targets, list)
            exprs.extend(t["expr"] for t in targets)
            inner = p.get("panels", [])
            assert isinstance(inner, list)
            walk(inner)
    walk(model["panels"])
    assert len(exprs) >= 20
    assert all("$" not in e.replace("$node", "").replace("$__rate_interval", "")
               for e in exprs), "a Grafana variable the check does not replace"
    proc = _check_exprs(tmp_path, exprs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in proc.stdout
    # the wrapping finds a broken expression
    broken = _check_exprs(tmp_path, [*exprs, "sum by (instance) (guardian_rules_blind"])
    assert broken.returncode != 0
