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

Drop-in files: every ``*.toml`` in ``guardian.toml.d/`` beside the config file (for
/etc/guardian/guardian.toml: /etc/guardian/guardian.toml.d/) is merged onto it in lexical
order of its name, as systemd merges a unit's drop-ins: a table merges key by key (so two
drop-ins can each add ``[sources.kmsg.patterns]``), a later value replaces an earlier one
(a list as a whole: lists are not appended), and a key that is a table in one file and a
value in another is an error (which of the two was meant is ambiguous). An error is
located in the file that set the key, as ``path:line:col``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, PrivateAttr, ValidationError

from guardian.core.diagnostics import (
    Diagnostic,
    Loc,
    Reporter,
    RuleError,
    read_toml,
    unknown_key,
)
from guardian.core.durations import Duration, PositiveDuration
from guardian.core.install import k8s_missing
from guardian.core.positions import Pos
from guardian.model.nodegroups import NodeConfig, NodeGroup, shadowed_by, unreachable
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


class FlightConfig(BaseModel):
    """The flight recorder (guardian.hostio.flight): a continuous low-rate profile of every
    CPU in perf's overwritable ring, dumped into a rule's evidence when it fires."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(False, description="run `perf record` for as long as the "
                          "service runs (opt-in)")
    frequency: int = Field(19, ge=1, le=1000, description="samples a second on each CPU")
    ring_mb: float = Field(8.0, gt=0, le=1024, description="perf's ring buffers, all CPUs "
                           "together (MiB): how far back a dump reaches")
    perf: str = Field("perf", min_length=1, description="the perf program (a name on "
                      "PATH or an absolute path)")
    dump_timeout: PositiveDuration = Field(30.0, description="one dump, perf script "
                                           "included; then it is abandoned")


class EvidenceConfig(BaseModel):
    """What guardian captures when a rule fires."""

    model_config = ConfigDict(extra="forbid")
    flight: FlightConfig = Field(default_factory=FlightConfig)


class Config(BaseModel):
    """The validated configuration; ``sources`` holds each source's validated model."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    disabled_sources: list[str] = Field(default_factory=list)
    sources: dict[str, BaseModel] = Field(default_factory=dict)
    fleet: BaseModel | None = None  # guardian.kube.fleet.FleetParams, when [fleet] is set
    holds: HoldsConfig = Field(default_factory=HoldsConfig)
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)
    node: NodeConfig = Field(default_factory=NodeConfig)
    groups: list[NodeGroup] = Field(default_factory=list, description="[[group]]: node "
                                    "groups, first match wins (guardian.model.nodegroups)")
    path: str = ""
    dropins: list[str] = Field(default_factory=list, description="the drop-in files "
                               "merged onto the file at ``path``, in order")
    _positions: _Layered | None = PrivateAttr(None)  # where each key was written

    def located(self, loc: Loc, message: str) -> Diagnostic:
        """``message`` at the key ``loc`` (``("group", 0, "rules")``) of the file that set
        it (a drop-in, where one did), as :func:`load_config` reports its errors: for
        ``guardian check``'s warnings. At 1:1 of ``path`` for a config not read from
        files."""
        if self._positions is None:
            return Diagnostic(self.path, 1, 1, message)
        where, pos = self._positions.where(loc)
        return Diagnostic(where, pos.line, pos.col, message)


DROPIN_SUFFIX = ".d"


def dropin_dir(path: str | Path) -> Path:
    """Where the drop-ins of the config file ``path`` are: ``guardian.toml.d`` beside
    ``guardian.toml``."""
    path = Path(path)
    return path.with_name(path.name + DROPIN_SUFFIX)


def dropin_files(path: str | Path) -> list[Path]:
    """The drop-in files of the config file ``path`` (``*.toml``, hidden files aside), in
    the order they are merged; none when the directory does not exist. Raises
    :class:`RuleError` when it exists and cannot be listed."""
    where = dropin_dir(path)
    try:
        names = os.listdir(where)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RuleError([Diagnostic(str(where), 1, 1, "cannot read the config's drop-in "
                                    f"directory: {exc.strerror or exc}")]) from None
    return [where / n for n in sorted(names) if n.endswith(".toml") and not n.startswith(".")]


class _Layered(Reporter):
    """Diagnostics of a config merged from several files: each in the file that last set
    the key (or the nearest of its tables), at its line and column there."""

    def __init__(self, files: dict[str, Reporter], origin: dict[Loc, str], first: str,
                 into: list[Diagnostic]) -> None:
        self.path, self.positions, self.diagnostics = first, {}, into
        self.files, self.origin = files, origin

    def _file(self, loc: Loc) -> Reporter:
        for n in range(len(loc), 0, -1):
            name = self.origin.get(loc[:n])
            if name is not None:
                return self.files[name]
        return self.files[self.path]

    def at(self, loc: Loc) -> Pos:
        return self._file(loc).at(loc)

    def where(self, loc: Loc) -> tuple[str, Pos]:
        """The file that set the key ``loc``, and its position there."""
        file = self._file(loc)
        return file.path, file.at(loc)

    def __call__(self, loc: Loc, message: str, value: bool = False) -> None:
        self._file(loc)(loc, message, value)


def _kind(value: object) -> str:
    return "a table" if isinstance(value, dict) else \
        "a list" if isinstance(value, list) else "a value"


def _merge(into: dict[str, Any], data: dict[str, Any], loc: Loc, name: str,
           origin: dict[Loc, str], files: dict[str, Reporter]) -> None:
    """``data`` (of the file ``name``) merged onto ``into``: tables key by key, anything
    else replaced; a table against a value is reported in ``name``."""
    for key, value in data.items():
        here: Loc = (*loc, key)
        if key in into and isinstance(into[key], dict) != isinstance(value, dict):
            before = origin.get(here, "")
            pos = files[before].at(here) if before else Pos(1, 1, 1, 1)
            files[name](here, f"{'.'.join(map(str, here))} is {_kind(value)} here and "
                              f"{_kind(into[key])} in {before}:{pos.line}:{pos.col}: a "
                              "drop-in merges a table key by key or replaces a value, "
                              "never a table with a value or a value with a table")
            continue
        origin[here] = name
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value, here, name, origin, files)
        else:
            into[key] = value


def load_config(path: str | Path | None, registry: Registry) -> Config:
    """Load and validate a config file and its drop-ins (:func:`dropin_files`), merged;
    None means defaults. Raises RuleError: every error of every file."""
    if path is None:
        return Config()
    path = Path(path)
    dropins = dropin_files(path)
    diags: list[Diagnostic] = []
    files: dict[str, Reporter] = {}
    data: dict[str, Any] = {}
    origin: dict[Loc, str] = {}
    for file in (path, *dropins):
        try:
            text, layer = read_toml(file, "config" if file == path else "config drop-in")
        except RuleError as exc:
            diags.extend(exc.diagnostics)
            continue
        files[str(file)] = Reporter(str(file), text, diags)
        _merge(data, layer, (), str(file), origin, files)
    if diags:
        raise RuleError(diags)
    report = _Layered(files, origin, str(path), diags)
    keys = ["engine", "service", "sources", "fleet", "holds", "evidence", "node", "group"]
    for key in data:
        if key not in keys:
            report((key,), unknown_key(key, keys))
    fleet: BaseModel | None = None
    if "fleet" in data:
        try:
            from guardian.kube.fleet import FleetParams
        except ImportError:
            report(("fleet",), f"[fleet] needs {k8s_missing()}")
        else:
            try:
                fleet = FleetParams.model_validate(data["fleet"])
            except ValidationError as exc:
                report.validation(exc, ("fleet",), FleetParams, table="fleet")
    holds = _holds_config(data.get("holds", {}), report)
    engine = EngineConfig()
    try:
        engine = EngineConfig.model_validate(data.get("engine", {}))
    except ValidationError as exc:
        report.validation(exc, ("engine",), EngineConfig, table="engine")
    service = ServiceConfig()
    try:
        service = ServiceConfig.model_validate(data.get("service", {}))
    except ValidationError as exc:
        report.validation(exc, ("service",), ServiceConfig, table="service")
    evidence = EvidenceConfig()
    try:
        evidence = EvidenceConfig.model_validate(data.get("evidence", {}))
    except ValidationError as exc:
        report.validation(exc, ("evidence",), EvidenceConfig, table="evidence")
    node, groups = _groups(data, report, fleet="fleet" in data)
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
    config = Config(engine=engine, service=service, disabled_sources=disabled,
                    sources=validated, fleet=fleet, holds=holds, evidence=evidence,
                    node=node, groups=groups,
                    path=str(path),
                    dropins=[str(f) for f in dropins])
    config._positions = report
    return config


def _groups(data: dict[str, Any], report: Reporter, fleet: bool
            ) -> tuple[NodeConfig, list[NodeGroup]]:
    """``[node]`` and the ``[[group]]`` tables (names unique; a group's own budget
    counted in ``[fleet]``'s Leases, so only with ``[fleet]``; none that a group before
    it keeps every node from: :func:`~guardian.model.nodegroups.shadowed_by`)."""
    node = NodeConfig()
    try:
        node = NodeConfig.model_validate(data.get("node", {}))
    except ValidationError as exc:
        report.validation(exc, ("node",), NodeConfig, table="node")
    raw = data.get("group", [])
    if not isinstance(raw, list):
        report(("group",), "node groups are [[group]] tables")
        return node, []
    groups: list[NodeGroup] = []
    for i, table in enumerate(raw):
        try:
            group = NodeGroup.model_validate(table)
        except ValidationError as exc:
            report.validation(exc, ("group", i), NodeGroup, prefix=_group_said(table, i))
            continue
        if any(g.name == group.name for g in groups):
            report(("group", i, "name"), f"node group {group.name!r} is named twice", True)
        if group.has_budget and not fleet:
            key = next(k for k in ("max_nodes", "max_percent", "min_healthy")
                       if getattr(group, k) is not None)
            report(("group", i, key), f"node group {group.name!r} has its own fleet budget, "
                   "which is counted in [fleet]'s Leases and bounded by [fleet]'s budget: "
                   "set [fleet] too")
        first = shadowed_by(group, groups)
        if first is not None:
            has = isinstance(table, dict) and "labels" in table
            report(("group", i, "labels") if has else ("group", i), unreachable(group, first))
        groups.append(group)
    return node, groups


def _group_said(table: object, i: int) -> str:
    """How a message names the ``[[group]]`` table ``table`` (the ``i``-th): by its name
    (``[[group]] 'canary': ``), else by its place (``[[group]] #3: ``)."""
    name = table.get("name") if isinstance(table, dict) else None
    return f"[[group]] {name!r}: " if isinstance(name, str) and name else \
        f"[[group]] #{i + 1}: "


def _holds_config(raw: Any, report: Reporter) -> HoldsConfig:
    table = dict(raw) if isinstance(raw, dict) else raw
    kube_raw = table.pop("kube", None) if isinstance(table, dict) else None
    out = HoldsConfig()
    try:
        out = HoldsConfig.model_validate(table)
    except ValidationError as exc:
        report.validation(exc, ("holds",), HoldsConfig, table="holds")
    if kube_raw is not None:
        try:
            from guardian.kube.holds import KubeHoldsParams
        except ImportError:
            report(("holds", "kube"), f"[holds.kube] needs {k8s_missing()}")
            return out
        try:
            out.kube = KubeHoldsParams.model_validate(kube_raw)
        except ValidationError as exc:
            report.validation(exc, ("holds", "kube"), KubeHoldsParams,
                              table="holds.kube")
    return out
