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

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from .durations import Duration
from .plugins import Registry
from .policy.loader import Diagnostic, RuleError, report_validation, toml_error
from .policy.positions import Pos, key_positions, locate

DEFAULT_CONFIG = Path("/etc/guardian/guardian.toml")


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    runs: PositiveInt = 20
    within: Duration = 3600.0


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval: Duration = Field(15.0, description="time between ticks")
    budget: BudgetConfig = Field(default_factory=BudgetConfig)


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
    path: str = ""


def load_config(path: str | Path | None, registry: Registry) -> Config:
    """Load and validate a config file; None means defaults. Raises RuleError."""
    if path is None:
        return Config()
    path = Path(path)
    diags: list[Diagnostic] = []
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError([Diagnostic(str(path), 1, 1, f"cannot read config: {exc}")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise RuleError([toml_error(str(path), exc)]) from None
    positions = key_positions(text)

    def report(loc: tuple[str | int, ...], message: str, value: bool = False) -> None:
        p = locate(positions, loc) or Pos(1, 1, 1, 1)
        diags.append(Diagnostic(str(path), p.value_line if value else p.line,
                                p.value_col if value else p.col, message))

    for key in data:
        if key not in ("engine", "service", "sources", "fleet"):
            report((key,), f"unknown key {key!r} (known keys: engine, service, sources, "
                           "fleet)")
    fleet: BaseModel | None = None
    if "fleet" in data:
        try:
            from .kube.fleet import FleetParams
        except ImportError:
            report(("fleet",), "[fleet] needs the Kubernetes extra: pip install "
                               "'guardian[k8s]'")
        else:
            try:
                fleet = FleetParams.model_validate(data["fleet"])
            except ValidationError as exc:
                report_validation(exc, ("fleet",), FleetParams, report)
    engine = EngineConfig()
    try:
        engine = EngineConfig.model_validate(data.get("engine", {}))
    except ValidationError as exc:
        report_validation(exc, ("engine",), EngineConfig, report)
    service = ServiceConfig()
    try:
        service = ServiceConfig.model_validate(data.get("service", {}))
    except ValidationError as exc:
        report_validation(exc, ("service",), ServiceConfig, report)
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
            report_validation(exc, ("sources", name), cls.Config, report,
                              prefix=f"source {name!r}: ")
    if diags:
        raise RuleError(diags)
    return Config(engine=engine, service=service, disabled_sources=disabled,
                  sources=validated, fleet=fleet, path=str(path))
