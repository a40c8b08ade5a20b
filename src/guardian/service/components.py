"""The service's options (:class:`ServiceOptions`), and what its loop drives, built once
at start from them and the config: the engine, the collector (and which source gives
which signal), the audit log and the executor (with the fleet budget), the metrics (and
their endpoint), the flight recorder when [evidence.flight] enables it. A part that cannot
be built is :class:`NotBuilt`, with the exit code
and why, and what was built before it is released."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from guardian.core.audit import AuditLog
from guardian.core.errors import GuardianError
from guardian.core.exitcodes import ExitCode
from guardian.engine.bounds import Budget
from guardian.engine.engine import Engine
from guardian.hostio.flight import FlightRecorder
from guardian.hostio.host import Host
from guardian.model.ruleset import Ruleset
from guardian.plugin.registry import Registry
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.coverage import Sight, sight_of
from guardian.runtime.executor import Executor
from guardian.runtime.metrics import Metrics
from guardian.runtime.state import SYSTEM

log = logging.getLogger("guardian.service")


@dataclass
class ServiceOptions:
    rules: list[str]
    dry_run: bool = False
    interval: float = 15.0
    state_path: Path | None = None
    audit_path: Path | None = None
    metrics_address: str = "127.0.0.1"
    metrics_port: int | None = 9847
    textfile: str | None = None
    apply_timeout: float = 300.0
    act_deadline: float = 360.0  # the longest the loop waits for one tick's actions
    require_root_owned_rules: bool = True
    root: Path = field(default_factory=lambda: Path("/"))


class NotBuilt(GuardianError):
    """A part the service cannot run without: ``code`` is the exit code, the message why."""

    def __init__(self, code: ExitCode, why: str) -> None:
        super().__init__(why)
        self.code = code


@dataclass
class Components:
    collector: Collector
    sight: Sight  # which source gives which signal, and why some give none
    executor: Executor
    flight: FlightRecorder | None = None  # built here, started once the service is ready


def build_engine(ruleset: Ruleset, config: Config) -> Engine:
    """The engine, with the config's budget and this boot's id (a step's ``recurs``
    counts the boots a rule fired in)."""
    budget = config.engine.budget
    return Engine(ruleset, Budget(budget.runs, budget.within), boot=SYSTEM.boot())


def build_components(opts: ServiceOptions, config: Config, registry: Registry,
                     ruleset: Ruleset, metrics: Metrics,
                     health: Callable[[], tuple[bool, str]],
                     ready: Callable[[], tuple[bool, str]] | None = None) -> Components:
    """The collector, the audit log and executor, and the metrics (served, when a port is
    given, with ``health`` as /healthz and ``ready`` as /readyz)."""
    collector = Collector.from_registry(Host(opts.root), registry, config)
    try:
        for name, reason in sorted(collector.unavailable.items()):
            if name in collector.unconfigured:  # the operator's choice, not a fault
                log.info("source %s not configured: %s", name, reason)
            else:
                log.warning("source %s unavailable: %s", name, reason)
        if opts.state_path is not None:
            for src in collector.sources:
                src.keep_state(opts.state_path.parent)
        executor = _executor(opts, config, collector.host)
        metrics.use_rules(ruleset, registry.catalogue())
        metrics.last_reload_ok.set(1)
        if opts.metrics_port is not None:
            failed = metrics.serve(opts.metrics_address, opts.metrics_port, health=health,
                                   ready=ready)
            if failed:  # no /healthz: a liveness probe would kill it later, for less
                if executor.audit is not None:
                    executor.audit.close()
                raise NotBuilt(ExitCode.TEMPFAIL, failed)
    except BaseException:
        collector.close()
        raise
    return Components(collector, sight_of(collector, registry), executor,
                      flight_recorder(opts, config))


def flight_recorder(opts: ServiceOptions, config: Config) -> FlightRecorder | None:
    """The flight recorder [evidence.flight] asks for (not started), perf's files kept
    beside the state file (the unit's StateDirectory; /tmp is private there)."""
    flight = config.evidence.flight
    if not flight.enabled:
        return None
    return FlightRecorder(frequency=flight.frequency, ring_mb=flight.ring_mb,
                          perf=flight.perf, dump_timeout=flight.dump_timeout,
                          workdir=opts.state_path.parent / "flight" if opts.state_path
                          else None)


def _executor(opts: ServiceOptions, config: Config, host: Host) -> Executor:
    try:
        audit = AuditLog(opts.audit_path) if opts.audit_path else None
    except OSError as exc:
        raise NotBuilt(ExitCode.CANTCREAT, f"cannot open the audit log {opts.audit_path}: "
                                           f"{exc.strerror or exc}") from exc
    executor = Executor(host, dry_run=opts.dry_run, audit=audit,
                        apply_timeout=opts.apply_timeout)
    if audit is not None and audit.unopened is not None:  # fail closed until it opens
        executor.audit_fault = f"audit log: {audit.unopened.strerror or audit.unopened}"
        log.error("cannot open the audit log %s: %s; nothing is applied until it can",
                  opts.audit_path, audit.unopened.strerror or audit.unopened)
    if config.fleet is not None:
        from guardian.kube.fleet import FleetBudget, FleetParams
        assert isinstance(config.fleet, FleetParams)
        try:
            executor.fleet = FleetBudget(config.fleet, groups=config.groups)
        except Exception as exc:  # lightkube's: no kubeconfig, no service account
            if audit is not None:
                audit.close()
            raise NotBuilt(ExitCode.CONFIG, f"[fleet] needs the Kubernetes API, and no "
                           f"credentials reach it: "
                           f"{str(exc).splitlines()[0] if str(exc) else exc!r}"
                           " (in a pod: the service account's token and "
                           "KUBERNETES_SERVICE_HOST; else a kubeconfig)") from exc
    return executor
