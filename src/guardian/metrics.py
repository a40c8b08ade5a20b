"""Prometheus metrics: rule states, actions by outcome, source errors, tick duration,
reloads, and the values of the signals the rules use. Served on loopback by default
(prometheus_client's exposition, served by :mod:`guardian.httpserve`, whose threads and
connections are bounded), and optionally written as a node_exporter textfile."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    make_wsgi_app,
    write_to_textfile,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from . import httpserve
from .snapshot import Snapshot

log = logging.getLogger("guardian.metrics")
STATES = ("inactive", "pending", "firing", "unknown")


class SignalCollector(PromCollector):
    """The last snapshot's values of the signals some rule uses, as gauges named
    ``guardian_signal_<name>`` (dots become underscores) with the family's labels."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.names: list[str] = []

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        for name in self.names:
            value = snap.values.get(name)
            if value is None:
                continue
            metric = "guardian_signal_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)
            if isinstance(value, dict):
                keys = sorted({k for labels in value for k, _ in labels})
                fam = GaugeMetricFamily(metric, f"signal {name}", labels=keys)
                for labels, v in value.items():
                    d = dict(labels)
                    fam.add_metric([d.get(k, "") for k in keys], v)
            else:
                fam = GaugeMetricFamily(metric, f"signal {name}", value=float(value))
            yield fam


class Metrics:
    """guardian's metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rule_state = Gauge("guardian_rule_state", "1 for the state each rule is in",
                                ["rule", "state"], registry=r)
        self.decisions = Counter("guardian_decisions", "decisions by rule and kind",
                                 ["rule", "kind"], registry=r)
        self.actions = Counter("guardian_actions", "action runs by rule, action, outcome "
                               "(ok, failed, error, planned)", ["rule", "action", "outcome"],
                               registry=r)
        self.source_errors = Gauge("guardian_source_errors", "failed collections per "
                                   "source since start", ["source"], registry=r)
        self.tick = Histogram("guardian_tick_seconds", "time of one tick (collect, "
                              "evaluate, act)", registry=r,
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                       10, 30))
        self.reloads = Counter("guardian_reloads", "rule reloads by result",
                               ["result"], registry=r)
        self.rules_loaded = Gauge("guardian_rules_loaded", "rules in the running ruleset",
                                  registry=r)
        self.last_reload_ok = Gauge("guardian_last_reload_success", "1 if the last reload "
                                    "(or start) loaded its rules", registry=r)
        self.persistence_ok = Gauge("guardian_persistence_ok", "1 while the state file and "
                                    "the audit log can be written (nothing is acted on "
                                    "otherwise)", registry=r)
        self.signals = SignalCollector()
        r.register(self.signals)
        self.server: Any = None

    def serve(self, address: str, port: int) -> str | None:
        """Start the HTTP endpoint; an error message instead of raising (a port in use
        leaves guardian running without metrics)."""
        try:
            self.server = httpserve.serve(address, port, make_wsgi_app(self.registry))
        except (OSError, RuntimeError) as exc:
            log.error("metrics endpoint %s:%d not started: %s", address, port, exc)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return f"metrics off ({address}:{port}: {why})"
        return None

    def write_textfile(self, path: str) -> None:
        try:
            write_to_textfile(path, self.registry)
        except OSError as exc:
            log.error("cannot write metrics textfile %s: %s", path, exc)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
