"""Writes what deploy/monitoring ships that is made, never edited by hand:

- deploy/kubernetes/components/alerts/prometheusrule.yaml, the PrometheusRule (Prometheus
  Operator) carrying the groups of guardian-alerts.rules.yaml unchanged;
- deploy/monitoring/guardian-dashboard.json, the Grafana dashboard, built with Grafana's own
  grafana-foundation-sdk (its builders, and its JSON encoder).

Run from the repository root after changing either (the test extra brings what it needs;
the dashboard needs Python 3.11 or later, as the SDK does)::

    python deploy/monitoring/generate.py

tests/unit/test_monitoring.py fails while a committed file differs from what this writes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RULES = HERE / "guardian-alerts.rules.yaml"
DASHBOARD = HERE / "guardian-dashboard.json"
PROMETHEUS_RULE = REPO / "deploy" / "kubernetes" / "components" / "alerts" / "prometheusrule.yaml"

# The scrape job as the alerts match it: `guardian`, or the Prometheus Operator's
# `<namespace>/guardian` for the PodMonitor.
JOB = '(.+/)?guardian'
NODE = "instance"  # the label that tells guardian's nodes apart: the scrape target
# the causes of a blind rule that are the operator's choice (no alert, not counted blind
# on the fleet's big number): guardian.runtime.coverage.CHOSEN
CHOSEN = "unconfigured|disabled"


# -- the PrometheusRule -------------------------------------------------------------------

def prometheus_rule_text() -> str:
    """The PrometheusRule, as YAML: the rule file's groups under ``spec``."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "guardian", "namespace": "guardian",
                     "labels": {"app.kubernetes.io/name": "guardian"}},
        "spec": {"groups": groups},
    }
    head = ("# Generated from deploy/monitoring/guardian-alerts.rules.yaml by\n"
            "# `python deploy/monitoring/generate.py`: edit that file, then run it.\n")
    return head + yaml.safe_dump(manifest, sort_keys=False, width=100, allow_unicode=True)


# -- the dashboard ------------------------------------------------------------------------

def dashboard_json() -> str:
    """The dashboard as Grafana imports it (JSON, keys sorted, a newline at the end)."""
    return json.dumps(dashboard_model(), indent=2, sort_keys=True) + "\n"


def dashboard_model() -> dict[str, Any]:
    """The dashboard, built by the SDK's builders and encoded by its encoder."""
    from grafana_foundation_sdk.builders import common as cb
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as dm

    source = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
    node = f'{NODE}=~"$node"'  # the node variable's choice (".+" for all)
    who = "{{" + NODE + "}}"  # a series' node in a legend
    ids = iter(range(1, 100))

    def query(expr: str, legend: str = "", *, instant: bool = False) -> Any:
        q = prometheus.Dataquery().expr(expr).datasource(source)
        if legend:
            q = q.legend_format(legend)
        return q.instant().format(prometheus_table()) if instant else q.range()

    def prometheus_table() -> Any:
        from grafana_foundation_sdk.models.prometheus import PromQueryFormat
        return PromQueryFormat.TABLE

    def thresholds(*steps: tuple[float | None, str]) -> Any:
        return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
            [dm.Threshold(value=v, color=c) for v, c in steps])

    def big_number(title: str, description: str, expr: str,
                   *steps: tuple[float | None, str]) -> Any:
        return (stat.Panel().id(next(ids)).title(title).description(description)
                .datasource(source).with_target(query(expr, instant=True))
                .thresholds(thresholds((None, "green"), *steps))
                .color_mode(common.BigValueColorMode.BACKGROUND)
                .graph_mode(common.BigValueGraphMode.NONE)
                .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
                .height(4).span(4))

    def graph(title: str, description: str, *targets: tuple[str, str], unit: str = "short",
              stacked: bool = False, width: int = 12) -> Any:
        panel = (timeseries.Panel().id(next(ids)).title(title).description(description)
                 .datasource(source).unit(unit).height(8).span(width)
                 .fill_opacity(10)
                 .legend(cb.VizLegendOptions().show_legend(True)
                         .display_mode(common.LegendDisplayMode.TABLE)
                         .placement(common.LegendPlacement.BOTTOM)
                         .calcs(["lastNotNull", "max"])))
        if stacked:
            panel = panel.stacking(cb.StackingConfig().mode(common.StackingMode.NORMAL))
        for expr, legend in targets:
            panel = panel.with_target(query(expr, legend))
        return panel

    def listing(title: str, description: str, expr: str, width: int = 12) -> Any:
        return (table.Panel().id(next(ids)).title(title).description(description)
                .datasource(source).with_target(query(expr, instant=True))
                .with_transformation(dm.DataTransformerConfig(
                    id_val="organize",
                    options={"excludeByName": {"Time": True, "Value": True, "__name__": True,
                                               "job": True, "endpoint": True,
                                               "container": True}}))
                .height(8).span(width))

    fleet = [
        big_number(
            "Nodes scraped", "guardian targets whose last scrape succeeded (up == 1).",
            f'sum(up{{job=~"{JOB}"}}) or vector(0)'),
        big_number(
            "Nodes not scraped", "guardian targets whose last scrape failed (up == 0): "
            "nothing is watched or remediated on them.",
            f'count(up{{job=~"{JOB}"}} == 0) or vector(0)', (1, "red")),
        big_number(
            "Rules firing", "Rules firing now, summed over every node.",
            'sum(guardian_rule_state{state="firing"}) or vector(0)', (1, "orange")),
        big_number(
            "Rules blind", "Rules without a value now (state unknown: what they "
            "watch is not seen) because their source cannot work or fails, summed over "
            "every node. Rules blind by the operator's choice (their source has nothing "
            "configured, or is disabled) are left out: 'Blind rules by cause' shows them.",
            f'sum(guardian_rule_blind{{cause!~"{CHOSEN}"}}) or vector(0)', (1, "yellow")),
        big_number(
            "Needs a human", "Rules that still fire after their actions ran their "
            "limit (escalated), summed over every node.",
            "sum(guardian_rule_needs_human) or vector(0)", (1, "red")),
        big_number(
            "Persistence failing", "Nodes whose guardian cannot write its state file "
            "or audit log, and so acts on nothing.",
            "count(guardian_persistence_ok == 0) or vector(0)", (1, "red")),
        graph(
            "Rules firing, pending and blind per node",
            "Per node, the rules in each state other than inactive.",
            (f'sum by ({NODE}) (guardian_rule_state{{state="firing"}})',
             f"{who} firing"),
            (f'sum by ({NODE}) (guardian_rule_state{{state="pending"}})',
             f"{who} pending"),
            (f"sum by ({NODE}) (guardian_rules_blind)", f"{who} blind")),
        graph(
            "Blind rules by cause, fleet",
            "Blind rules over every node by cause: unconfigured (a source with nothing "
            "configured to read) and disabled are the operator's choice; unavailable, "
            "failing and absent are not (GuardianRuleBlind alerts on them).",
            ("sum by (cause) (guardian_rule_blind)", "{{cause}}"), stacked=True),
        graph(
            "Actions by result, fleet",
            "Action runs over every node, by outcome: ok, unverified, failed, error, "
            "refused, planned, would_act (a rule in shadow mode), held.",
            ("sum by (outcome) (increase(guardian_actions_total[$__rate_interval]))",
             "{{outcome}}"), stacked=True),
        listing(
            "Rules that need a human", "Every node's rules that escalated and still "
            "fire: `guardian why RULE` on the node says what it saw and did.",
            "guardian_rule_needs_human == 1"),
        listing(
            "guardian versions", "How many nodes run each version of guardian.",
            "count by (version, python) (guardian_build_info)")]

    one = [
        graph(
            "Rules by state", "The node's rules in each state: inactive, pending, "
            "firing, unknown (blind).",
            (f"sum by ({NODE}, state) (guardian_rule_state{{{node}}})",
             f"{who} {{{{state}}}}"), stacked=True),
        listing(
            "Rules not inactive", "The node's rules pending, firing or unknown now.",
            f'guardian_rule_state{{{node}, state!="inactive"}} == 1'),
        listing(
            "Blind rules and why", "The node's blind rules and their cause: unconfigured "
            "or disabled (the operator's choice), unavailable, failing or absent. "
            "`guardian health` on the node says why in words.",
            f"guardian_rule_blind{{{node}}} == 1"),
        graph(
            "Tick duration", "How long one tick (collect, evaluate, act) takes: the "
            "99th and 50th percentiles.",
            (f"histogram_quantile(0.99, sum by ({NODE}, le) "
             f"(rate(guardian_tick_seconds_bucket{{{node}}}[$__rate_interval])))",
             f"{who} p99"),
            (f"histogram_quantile(0.5, sum by ({NODE}, le) "
             f"(rate(guardian_tick_seconds_bucket{{{node}}}[$__rate_interval])))",
             f"{who} p50"), unit="s", width=8),
        graph(
            "Since the last tick", "Seconds since the last tick completed: it grows "
            "while the loop is stuck (GuardianStuck alerts past 300 s).",
            (f"time() - guardian_last_tick_timestamp_seconds{{{node}}}",
             who), unit="s", width=8),
        graph(
            "Persistence ok", "1 while the state file and the audit log can be "
            "written; at 0 nothing is acted on.",
            (f"guardian_persistence_ok{{{node}}}", who), width=8),
        graph(
            "Actions by result", "The node's action runs by rule, action and outcome.",
            (f"sum by ({NODE}, rule, action, outcome) "
             f"(increase(guardian_actions_total{{{node}}}[$__rate_interval])) > 0",
             "{{rule}} {{action}} {{outcome}}"), stacked=True),
        graph(
            "Sources up", "1 while a source's signals have values; 0 when it is "
            "unavailable on this host or failing (the rules over it are blind).",
            (f"guardian_source_up{{{node}}}", f"{who} {{{{source}}}}")),
        graph(
            "Source errors", "Failed collections per source.",
            (f"sum by ({NODE}, source) "
             f"(increase(guardian_source_errors_total{{{node}}}[$__rate_interval]))",
             f"{who} {{{{source}}}}")),
        listing(
            "Paused, in shadow mode, needing a human",
            "The node's rules a hold pauses, that run in shadow mode (observe), or that "
            "need a human.",
            f"(guardian_rule_paused{{{node}}} == 1) or (guardian_rule_observe{{{node}}} "
            f"== 1) or (guardian_rule_needs_human{{{node}}} == 1)")]

    built = (db.Dashboard("guardian")
             .uid("guardian")
             .description("guardian on one node and across the fleet: its rules, its "
                          "actions, its loop and its sources. Generated by "
                          "deploy/monitoring/generate.py.")
             .tags(["guardian"])
             .editable()
             .tooltip(dm.DashboardCursorSync.CROSSHAIR)
             .time("now-6h", "now")
             .refresh("1m")
             .with_variable(db.DatasourceVariable("datasource").label("Data source")
                            .type("prometheus"))
             .with_variable(db.QueryVariable("node").label("Node")
                            .datasource(source)
                            .query(f"label_values(guardian_build_info, {NODE})")
                            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
                            .sort(dm.VariableSort.ALPHABETICAL_ASC)
                            .multi(True).include_all(True).all_value(".+")))
    for title, panels in (("Fleet", fleet), ("Node $node", one)):
        built = built.with_row(db.Row(title).id(next(ids)).collapsed(False))
        for panel in panels:
            built = built.with_panel(panel)
    encoded: dict[str, Any] = json.loads(json.dumps(built.build(), cls=JSONEncoder))
    return encoded


def round_trip(model: dict[str, Any]) -> dict[str, Any]:
    """The dashboard read back by the SDK's model and encoded again: what the SDK does not
    know, or reads otherwise, does not come back the same."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard
    again: dict[str, Any] = json.loads(json.dumps(Dashboard.from_json(model),
                                                  cls=JSONEncoder))
    return again


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' queries, and the selector of
    each variable's ``label_values(SELECTOR, LABEL)`` (a Grafana function, not PromQL)."""
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            found.extend(t["expr"] for t in p.get("targets", []))
            walk(p.get("panels", []))
    walk(model.get("panels", []))
    for var in model.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            m = re.fullmatch(r"label_values\((.+), *\w+\)", var["query"])
            found.append(m[1] if m else var["query"])
    return found


def main() -> int:
    PROMETHEUS_RULE.write_text(prometheus_rule_text())
    print(f"wrote {PROMETHEUS_RULE.relative_to(REPO)}")
    if sys.version_info < (3, 11):
        print("the dashboard needs Python 3.11 or later (grafana-foundation-sdk); not written",
              file=sys.stderr)
        return 1
    DASHBOARD.write_text(dashboard_json())
    print(f"wrote {DASHBOARD.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
