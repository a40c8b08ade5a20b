"""Prometheus metrics: rule states, blind rules and why (``guardian_rule_blind{rule,cause}``),
actions by outcome, remedies' outcomes (how long a rule
took to resolve, which step resolved it, which did not within its verify, which needed a
human), source errors, tick duration and
the last tick's time, reloads, process and build information, and the values of the
signals the rules use. Served on loopback by default
(prometheus_client's exposition, served by :mod:`guardian.runtime.httpserve`, whose threads and
connections are bounded), and optionally written as a node_exporter textfile."""

from __future__ import annotations

import logging
import platform
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
    write_to_textfile,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from guardian.core.snapshot import Family, Labels, SignalSpec, Snapshot
from guardian.core.version import __version__
from guardian.engine.decision import Decision
from guardian.model.holds import Hold
from guardian.model.kinds import ENGINE_KINDS, PHASES
from guardian.model.ruleset import CompiledRule, Ruleset
from guardian.model.runtime import Matcher, matches
from guardian.runtime import httpserve
from guardian.runtime.coverage import CAUSES

log = logging.getLogger("guardian.metrics")
STATES = (*PHASES, "unknown")
BLIND_CAUSES = CAUSES  # the values of guardian_rule_blind's `cause`
KINDS = ENGINE_KINDS
OUTCOMES = ("ok", "unverified", "failed", "error", "refused", "planned", "would_act", "held")
RELOADS = ("ok", "failed")
# what became of a remedy's step (a rule without steps: its actions, step "1"; "0": it
# resolved before any ran): it resolved the rule, the rule still fired when its verify
# passed and the next step ran, or it needed a human
REMEDY_OUTCOMES = ("resolved", "climbed", "needs_human")
# fire -> resolved: minutes to hours
RESOLVE_BUCKETS = (60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400)
PID_LABELS = frozenset({"pid", "ppid"})  # unbounded: summed away, never exported


def exported_name(spec: SignalSpec) -> tuple[str, float]:
    """The Prometheus name of a signal and the factor its values are scaled by: dots
    become underscores, percentages become ratios (``_pct`` -> ``_ratio``, 0-1), as
    Prometheus' naming conventions ask; a counter's ``_total`` is added by the client."""
    name = "guardian_signal_" + re.sub(r"[^a-zA-Z0-9_]", "_", spec.name)
    if name.endswith("_pct"):
        return name[:-4] + "_ratio", 0.01
    if name.endswith("_total") and not spec.counter:  # `_total` is for counters only
        return name[:-6], 1.0
    return name, 1.0


class SignalCollector(PromCollector):
    """The last snapshot's values of the signals some rule uses: counters as counters,
    levels as gauges, only the family members some rule selects, PID labels summed
    away (so the label sets stay bounded)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None
        self.specs: dict[str, SignalSpec] = {}
        self.selectors: dict[str, list[tuple[Matcher, ...]] | None] = {}
        # whether a family's member is selected, decided once per member (the selectors
        # hold until the next use(); a family's members mostly stay from tick to tick)
        self.picks: dict[str, dict[Labels, bool]] = {}

    def use(self, ruleset: Ruleset, catalogue: Mapping[str, SignalSpec]) -> None:
        """Export what the rules of ``ruleset`` read."""
        selectors: dict[str, list[tuple[Matcher, ...]] | None] = {}
        for rule in ruleset.rules:
            for ref in rule.condition.refs:
                if ref.name not in catalogue:
                    continue
                chosen = selectors.setdefault(ref.name, [])
                if ref.matchers is None or chosen is None:
                    selectors[ref.name] = None  # the whole family is read
                else:
                    chosen.append(ref.matchers)
        self.selectors = selectors
        self.specs = {n: catalogue[n] for n in selectors}
        self.picks = {}

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        for name, chosen in sorted(self.selectors.items()):
            value = snap.values.get(name)
            if value is None:
                continue
            spec = self.specs[name]
            metric, scale = exported_name(spec)
            kind = CounterMetricFamily if spec.counter else GaugeMetricFamily
            doc = f"{spec.help} ({spec.name})"
            if not isinstance(value, dict):
                yield kind(metric, doc, value=float(value) * scale)
                continue
            picked = list(value.items()) if chosen is None else \
                self._picked(name, chosen, value)
            names = {k for labels, _ in picked for k, _ in labels} if spec.open_labels \
                else spec.labels  # open: each member's own labels too (an exporter's)
            keys = sorted(k for k in names if k not in PID_LABELS)
            members: dict[tuple[str, ...], float] = {}
            for labels, v in picked:
                d = dict(labels)
                key = tuple(d.get(k, "") for k in keys)
                members[key] = members.get(key, 0.0) + v * scale
            fam = kind(metric, doc, labels=keys)
            for key, v in sorted(members.items()):
                fam.add_metric(list(key), v)
            yield fam


    def _picked(self, name: str, chosen: list[tuple[Matcher, ...]],
                value: Family) -> list[tuple[Labels, float]]:
        """The members of ``value`` some selector of ``chosen`` matches."""
        known = self.picks.setdefault(name, {})
        if len(known) > 2 * len(value) + 1024:  # members come and go: bounded
            known.clear()
        out = []
        for labels, v in value.items():
            keep = known.get(labels)
            if keep is None:
                keep = known[labels] = any(matches(labels, m) for m in chosen)
            if keep:
                out.append((labels, v))
        return out


class ErrorCounts(PromCollector):
    """Failed collections per source since start (the collector counts them)."""

    def __init__(self) -> None:
        self.counts: Mapping[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("guardian_source_errors", "failed collections per source "
                                  "since start", labels=["source"])
        for src, n in sorted(self.counts.items()):
            fam.add_metric([src], float(n))
        yield fam


class SourceUp(PromCollector):
    """Whether each source's signals have values: 0 for one that cannot work on this host
    (unavailable at start: /dev/kmsg not readable without privileges) or that failed at
    the last tick. Rules over its signals stay unknown meanwhile."""

    def __init__(self) -> None:
        self.up: Mapping[str, bool] = {}

    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily("guardian_source_up", "1 while a source's signals have "
                                "values, 0 when it is unavailable or failing",
                                labels=["source"])
        for src, up in sorted(self.up.items()):
            fam.add_metric([src], 1.0 if up else 0.0)
        yield fam


class BlindRules(PromCollector):
    """Each blind rule and why, as data: ``guardian_rule_blind{rule, cause}`` 1, a series
    only while the rule is blind (:data:`~guardian.runtime.coverage.CAUSES`)."""

    def __init__(self) -> None:
        self.causes: Mapping[str, str] = {}  # rule -> its cause

    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily(
            "guardian_rule_blind", "1 for each rule with no value at the last tick (blind), "
            "with why: unconfigured (its source has nothing configured to read) or "
            "disabled (its source disabled in the config), the operator's choice; "
            "unavailable (its source cannot work on this host), failing (its source "
            "failed, or an input was refused or stale) or absent (its source gives no "
            "such value now)", labels=["rule", "cause"])
        for rule, cause in sorted(self.causes.items()):
            fam.add_metric([rule, cause], 1.0)
        yield fam


class Operations(PromCollector):
    """What operators set and what needs them: every hold in force (its expiry as the
    value), the rules a hold pauses now, the rules in shadow mode and those that ran their
    limit without resolving (they need a human)."""

    def __init__(self) -> None:
        self.holds: list[Hold] = []
        self.paused: dict[str, bool] = {}
        self.observe: dict[str, bool] = {}
        self.needs_human: dict[str, bool] = {}
        self.validating: dict[str, bool] = {}
        self.demoted: dict[str, bool] = {}
        self.awaiting: dict[str, bool] = {}

    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily("guardian_hold_expiry_timestamp_seconds", "holds in force "
                                "(pauses, silences): when each ends (Unix time)",
                                labels=["source", "rules", "author", "reason"])
        for h in sorted(self.holds, key=lambda h: (h.source, h.matcher, h.until)):
            fam.add_metric([h.source, h.matcher, h.author, h.reason[:200]], h.until)
        yield fam
        tripped = GaugeMetricFamily("guardian_breaker_tripped", "1 for each rule whose "
                                    "correlated-failure breaker has tripped in a group this "
                                    "node is in: its disruptive actions are held here until "
                                    "a human releases it", labels=["rule", "group"])
        for h in sorted({h for h in self.holds if h.latched}, key=lambda h: h.source):
            tripped.add_metric([h.rule, h.source.removeprefix("breaker ")], 1.0)
        yield tripped
        for name, doc, values in (
                ("guardian_rule_paused", "1 while a hold pauses the rule", self.paused),
                ("guardian_rule_observe", "1 for a rule in shadow mode (mode = \"observe\"): "
                 "its actions count as would_act", self.observe),
                ("guardian_rule_needs_human", "1 while the rule needs a human (it escalated: "
                 "its limit or its ladder's steps ran and it still fires, or it was not "
                 "validated in time)", self.needs_human),
                ("guardian_rule_validating", "1 while the rule stopped firing and its clean-up "
                 "(uncordon, untaint) waits for its validation", self.validating),
                ("guardian_rule_demoted", "1 while the rule is demoted to shadow mode: its "
                 "remedy did not work here (demote: too few of its attempts resolved "
                 "without a human)", self.demoted),
                ("guardian_rule_awaiting_approval", "1 while the rule's disruptive actions "
                 "wait for a human's approval (approve: guardian approve, or the node "
                 "annotation guardian.io/approve)", self.awaiting)):
            g = GaugeMetricFamily(name, doc, labels=["rule"])
            for rule, on in sorted(values.items()):
                g.add_metric([rule], 1.0 if on else 0.0)
            yield g


def decision_kinds(rule: CompiledRule) -> tuple[str, ...]:
    """The decision kinds ``rule`` can make: every kind but ``validating`` (only with a
    ``validate`` condition), ``demoted`` (only with ``demote``) and ``awaiting_approval``
    (only with an ``approve`` gate, on the rule or a step)."""
    spec = rule.spec
    cannot = {kind for kind, can in (
        ("validating", rule.validation is not None),
        ("demoted", spec.demote is not None),
        ("awaiting_approval", spec.approve is not None
         or any(s.approve is not None for s in spec.step))) if not can}
    return tuple(k for k in KINDS if k not in cannot)


class Metrics:
    """guardian's metrics in a registry of their own, named and typed by Prometheus'
    conventions (``promtool check metrics`` is clean): counters end in ``_total``, times
    are seconds, ratios are 0-1, labelled counters exist at zero from the start.

    No ``_created`` series: prometheus_client adds one beside every counter and histogram
    child (the time it was made, which nothing here reads: the alerts and dashboard take
    ``increase`` of counters that exist at zero from the start). They were half of the page
    on a node with 80 rules. The switch is the client's and process-wide
    (``disable_created_metrics``); guardian's process exports nothing else."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped in the client)
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_...
        Info("guardian_build", "guardian's version and the Python running it",
             registry=r).info({"version": __version__,
                               "python": platform.python_version()})
        self.rule_state = Gauge("guardian_rule_state", "1 for the state each rule is in",
                                ["rule", "state"], registry=r)
        self.decisions = Counter("guardian_decisions", "decisions by rule and kind",
                                 ["rule", "kind"], registry=r)
        self.actions = Counter("guardian_actions", "action runs by rule, action, outcome "
                               "(ok, unverified, failed, error, refused, planned; would_act: "
                               "a shadow rule would have acted; held: planned while held)",
                               ["rule", "action", "outcome"],
                               registry=r)
        self.resolve_seconds = Histogram(
            "guardian_rule_resolve_seconds", "time from a rule firing to it resolving (its "
            "clean-up running: after its validation, where it has one)", ["rule"],
            registry=r, buckets=RESOLVE_BUCKETS)
        self.outcomes = Counter("guardian_rule_outcomes", "what became of each step of a "
                                "rule's remedy (a rule without steps: step 1 is its "
                                "actions; step 0: none had run): resolved, climbed (still "
                                "firing after its verify: the next step ran), needs_human "
                                "(its escalation ran)", ["rule", "step", "outcome"],
                                registry=r)
        self.source_errors = ErrorCounts()
        r.register(self.source_errors)
        self.source_up = SourceUp()
        r.register(self.source_up)
        self.tick = Histogram("guardian_tick_seconds", "time of one tick (collect, "
                              "evaluate, act)", registry=r,
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                       10, 30))
        self.last_tick = Gauge("guardian_last_tick_timestamp_seconds", "when the last tick "
                               "completed (Unix time): a stuck loop stops moving it",
                               registry=r)
        self.reloads = Counter("guardian_reloads", "rule reloads by result",
                               ["result"], registry=r)
        for result in RELOADS:
            self.reloads.labels(result)
        self.rules_loaded = Gauge("guardian_rules_loaded", "rules in the running ruleset",
                                  registry=r)
        self.last_reload_ok = Gauge("guardian_last_reload_success", "1 if the last reload "
                                    "(or start) loaded its rules", registry=r)
        self.persistence_ok = Gauge("guardian_persistence_ok", "1 while the state file and "
                                    "the audit log can be written (nothing is acted on "
                                    "otherwise)", registry=r)
        self.rules_blind = Gauge("guardian_rules_blind", "rules whose condition had no "
                                 "value at the last tick (blind: what they watch is not "
                                 "seen); each is guardian_rule_state{state=\"unknown\"}",
                                 registry=r)
        self.rule_blind = BlindRules()
        r.register(self.rule_blind)
        self.signals = SignalCollector()
        r.register(self.signals)
        self.operations = Operations()
        r.register(self.operations)
        self.server: Any = None

    def use_rules(self, ruleset: Ruleset, catalogue: Mapping[str, SignalSpec]) -> None:
        """Follow a (re)loaded ruleset: its signals are exported, and every rule's
        decision and action counters exist at zero before anything happens: the decisions
        of the kinds the rule can make (:func:`decision_kinds`)."""
        self.signals.use(ruleset, catalogue)
        self.rules_loaded.set(len(ruleset.rules))
        for rule in ruleset.rules:
            for kind in decision_kinds(rule):
                self.decisions.labels(rule.name, kind)
            for action in [*rule.actions, *(a for s in rule.steps for a in s.actions)]:
                for outcome in OUTCOMES:
                    self.actions.labels(rule.name, action.spec.use, outcome)
            for step in range(1, len(rule.steps) + 1 if rule.steps else 2):
                for outcome in REMEDY_OUTCOMES:
                    if outcome != "climbed" or step < len(rule.steps):
                        self.outcomes.labels(rule.name, str(step), outcome)

    def outcome(self, d: Decision) -> None:
        """Count what ``d`` says became of a remedy: the rule resolved (and how long
        after it fired), a step's verify passed with it still firing (the next step ran),
        or its escalation ran."""
        if d.kind == "resolved" and d.lasted is not None:
            self.resolve_seconds.labels(d.rule).observe(d.lasted)
            self.outcomes.labels(d.rule, str(d.step), "resolved").inc()
        elif d.kind in ("firing", "retry") and d.step > 1 and d.actions:
            self.outcomes.labels(d.rule, str(d.step - 1), "climbed").inc()
        elif d.kind == "escalated":
            self.outcomes.labels(d.rule, str(d.step), "needs_human").inc()

    def serve(self, address: str, port: int,
              health: Callable[[], tuple[bool, str]] | None = None,
              ready: Callable[[], tuple[bool, str]] | None = None) -> str | None:
        """Start the HTTP endpoint (``/metrics``, ``/healthz`` answered by ``health`` and
        ``/readyz`` by ``ready``, any other path 404); an error message instead of
        raising, for the caller to report (the service does not start without its
        /healthz)."""
        app = _with_health(make_wsgi_app(self.registry), health, ready)
        try:
            self.server = httpserve.serve(address, port, app)
        except (OSError, RuntimeError) as exc:
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


def _with_health(app: Any, health: Callable[[], tuple[bool, str]] | None,
                 ready: Callable[[], tuple[bool, str]] | None = None) -> Any:
    """``/metrics``: the metrics ``app``; ``/healthz``: 200 while the loop completes
    ticks, 503 once it is stuck (the liveness probe's question); ``/readyz``: 200 once
    the rules are loaded and evaluated, 503 before (the readiness probe's); any other
    path 404, naming the paths served (a mistyped probe path fails, never passes on the
    metrics page)."""
    routes = {**({"/healthz": health} if health is not None else {}),
              **({"/readyz": ready} if ready is not None else {})}
    served = ", ".join(["/metrics", *routes])

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return app(environ, start_response)
        answer = routes.get(path)
        if answer is None:
            return _text(start_response, "404 Not Found",
                         f"not found: {path[:100]}; guardian serves {served}")
        ok, text = answer()
        return _text(start_response, "200 OK" if ok else "503 Service Unavailable", text)
    return wsgi


def _text(start_response: Any, status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]
