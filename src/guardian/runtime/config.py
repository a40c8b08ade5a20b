"""guardian's own configuration file (TOML): engine settings and per-source options.

```toml
[engine]
interval = "15s"
budget = { runs = 20, within = "1h" }

[sources]
disabled = ["pressure"]

[sources.kmsg]
patterns = { xid = "NVRM: Xid" }
```
Errors are reported as ``path:line:col`` like rule-file errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_toml, unknown_key
from guardian.core.durations import Duration, PositiveDuration
from guardian.model.window import Window
from guardian.plugin.registry import Registry


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    runs: PositiveInt = 20
    within: PositiveDuration = 3600.0


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval: PositiveDuration = Field(15.0, description="time between ticks")
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    window: Window | None = Field(None, description="the maintenance window of every rule "
                                  "that sets none: outside it, disruptive actions wait")


class HoldsConfig(BaseModel):
    """Where holds (pauses, silences) come from besides `guardian pause`."""

    model_config = ConfigDict(extra="forbid")
    dropin: str = Field("/etc/guardian/holds.d", description="*.toml files of [[hold]] "
                        "tables that configuration management drops here")
    file: str = Field("", description="`guardian pause`'s holds (default: holds.json "
                      "beside the state file)")
    kube: BaseModel | None = Field(None, description="fleet-wide holds: a ConfigMap and "
                                   "this node's annotation (guardian.kube.holds)")


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    address: str = Field("127.0.0.1", description="listen address (loopback by default)")
    port: int = Field(9847, ge=1, le=65535)
    textfile: str = Field("", description="also write a node_exporter textfile here")


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: list[str] = Field(["/etc/guardian/rules"], min_length=1)
    dry_run: bool = False
    state_file: str = Field("", description="default: $STATE_DIRECTORY/state.json, else "
                            "/var/lib/guardian/state.json")
    audit_log: str = Field("", description="default: $LOGS_DIRECTORY/audit.jsonl, else "
                           "/var/log/guardian/audit.jsonl")
    apply_timeout: Duration = Field(300.0, gt=0)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)


class Config(BaseModel):
    """The validated configuration; ``sources`` holds each source's validated model."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    disabled_sources: list[str] = Field(default_factory=list)
    sources: dict[str, BaseModel] = Field(default_factory=dict)
    fleet: BaseModel | None = None  # guardian.kube.fleet.FleetParams, when [fleet] is set
    holds: HoldsConfig = Field(default_factory=HoldsConfig)
    path: str = ""


def load_config(path: str | Path | None, registry: Registry) -> Config:
    """Load and validate a config file; None means defaults. Raises RuleError."""
    if path is None:
        return Config()
    path = Path(path)
    text, data = read_toml(path, "config")
    diags: list[Diagnostic] = []
    report = Reporter(str(path), text, diags)
    keys = ["engine", "service", "sources", "fleet", "holds"]
    for key in data:
        if key not in keys:
            report((key,), unknown_key(key, keys))
    fleet: BaseModel | None = None
    if "fleet" in data:
        try:
            from guardian.kube.fleet import FleetParams
        except ImportError:
            report(("fleet",), "[fleet] needs the Kubernetes extra: pip install "
                               "'node-guardian[k8s]'")
        else:
            try:
                fleet = FleetParams.model_validate(data["fleet"])
            except ValidationError as exc:
                report.validation(exc, ("fleet",), FleetParams)
    holds = _holds_config(data.get("holds", {}), report)
    engine = EngineConfig()
    try:
        engine = EngineConfig.model_validate(data.get("engine", {}))
    except ValidationError as exc:
        report.validation(exc, ("engine",), EngineConfig)
    service = ServiceConfig()
    try:
        service = ServiceConfig.model_validate(data.get("service", {}))
    except ValidationError as exc:
        report.validation(exc, ("service",), ServiceConfig)
    raw_sources: dict[str, Any] = dict(data.get("sources", {}))
    disabled = raw_sources.pop("disabled", [])
    if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
        report(("sources", "disabled"), "`disabled` must be a list of source names", True)
        disabled = []
    for name in disabled:
        if name not in registry.sources:
            report(("sources", "disabled"), f"unknown source {name!r} (known: "
                   f"{', '.join(sorted(registry.sources))})", True)
    validated: dict[str, BaseModel] = {}
    for name, table in raw_sources.items():
        cls = registry.sources.get(name)
        if cls is None:
            report(("sources", name), f"unknown source {name!r} (known: "
                   f"{', '.join(sorted(registry.sources))})")
            continue
        try:
            validated[name] = cls.Config.model_validate(table)
        except ValidationError as exc:
            report.validation(exc, ("sources", name), cls.Config,
                              prefix=f"source {name!r}: ")
    if diags:
        raise RuleError(diags)
    return Config(engine=engine, service=service, disabled_sources=disabled,
                  sources=validated, fleet=fleet, holds=holds, path=str(path))


def _holds_config(raw: Any, report: Reporter) -> HoldsConfig:
    table = dict(raw) if isinstance(raw, dict) else raw
    kube_raw = table.pop("kube", None) if isinstance(table, dict) else None
    out = HoldsConfig()
    try:
        out = HoldsConfig.model_validate(table)
    except ValidationError as exc:
        report.validation(exc, ("holds",), HoldsConfig)
    if kube_raw is not None:
        try:
            from guardian.kube.holds import KubeHoldsParams
        except ImportError:
            report(("holds", "kube"), "[holds.kube] needs the Kubernetes extra: pip install "
                                      "'node-guardian[k8s]'")
            return out
        try:
            out.kube = KubeHoldsParams.model_validate(kube_raw)
        except ValidationError as exc:
            report.validation(exc, ("holds", "kube"), KubeHoldsParams)
    return out
