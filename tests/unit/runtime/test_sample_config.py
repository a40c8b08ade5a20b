"""The shipped guardian.toml (systemd/guardian.toml; /etc/guardian/guardian.toml after
`guardian init` or a package) lists every section and key of the configuration, as
docs/service.md says it does: the keys are derived from the pydantic models the loader
validates with (runtime/config.py, each registered source's ``Config``, [fleet]'s and
[holds.kube]'s parameters), and a key counts as listed when it is set or commented out
(``# key = value`` under a section, itself set or ``# [commented]``). The commented
examples are uncommented and loaded too, so none of them can drift from the models."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from guardian.core.diagnostics import parse_toml
from guardian.model.nodegroups import NodeConfig, NodeGroup
from guardian.plugin.registry import Registry
from guardian.runtime.config import (
    Config,
    EngineConfig,
    EvidenceConfig,
    HoldsConfig,
    ServiceConfig,
    load_config,
)
from tests.support.checkout import REPO

SHIPPED = REPO / "systemd" / "guardian.toml"
Key = tuple[str, ...]  # a dotted key; "*" stands for any name of a table of tables

# `# [section]` or `# key = value` (one space at most after the #): a commented entry;
# prose, and the indented continuation comments, stay comments
COMMENTED = re.compile(r"^# ?(?=\[\[?[\w.\"-]+\]|[A-Za-z_][\w-]*\s*=)")


def uncommented(text: str) -> str:
    """``text`` with every commented section and key set."""
    return "\n".join(COMMENTED.sub("", line) for line in text.splitlines()) + "\n"


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names (through Optional, unions, Annotated),
    BaseModel itself (a field filled in by the loader) excluded."""
    if isinstance(annotation, type):
        return [annotation] if issubclass(annotation, BaseModel) and \
            annotation is not BaseModel else []
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def model_keys(model: type[BaseModel], prefix: Key = ()) -> set[Key]:
    """Every key a table validated by ``model`` takes, nested tables spelled out; a table
    of tables (``dict[str, Model]``) as ``prefix + (field, "*")``."""
    out: set[Key] = set()
    for name, field in model.model_fields.items():
        key = (*prefix, field.alias or name)
        subs = _models(field.annotation)
        args = typing.get_args(field.annotation)
        if subs:
            out |= model_keys(subs[0], key) or {key}
        elif typing.get_origin(field.annotation) is dict and len(args) == 2 and \
                _models(args[1]):
            out |= model_keys(_models(args[1])[0], (*key, "*"))
        else:
            out.add(key)
    return out


def config_keys(registry: Registry) -> set[Key]:
    """Every key of guardian.toml: what load_config reads, by the models it validates
    with. A field of Config this does not place fails here first."""
    from guardian.kube.fleet import FleetParams
    from guardian.kube.holds import KubeHoldsParams

    placed = {"engine", "service", "holds", "disabled_sources", "sources", "fleet", "path",
              "dropins", "evidence", "node", "groups"}  # path and dropins: where it was
    # read, no key; groups: the [[group]] tables
    assert set(Config.model_fields) == placed, (
        "a new field of Config: say here which key of guardian.toml it is")
    keys = model_keys(EngineConfig, ("engine",)) | model_keys(ServiceConfig, ("service",))
    keys |= model_keys(EvidenceConfig, ("evidence",))
    keys |= {k for k in model_keys(HoldsConfig, ("holds",)) if k != ("holds", "kube")}
    keys |= model_keys(KubeHoldsParams, ("holds", "kube"))
    keys |= model_keys(FleetParams, ("fleet",))
    keys |= model_keys(NodeConfig, ("node",)) | model_keys(NodeGroup, ("group", "*"))
    keys.add(("sources", "disabled"))
    for name, cls in registry.sources.items():
        keys |= model_keys(cls.Config, ("sources", name)) or {("sources", name)}
    return keys


def listed(data: Any, key: Key) -> bool:
    if not key:
        return True
    head, rest = key[0], key[1:]
    if head == "*" and isinstance(data, list):
        return any(listed(v, rest) for v in data)
    if not isinstance(data, dict):
        return False
    if head == "*":  # any table of a table of tables, or of an array of tables
        return any(listed(v, rest) for v in data.values())
    return head in data and listed(data[head], rest)


def _registry() -> Registry:
    """guardian's own sources (a registry of its own: other tests add plugins to the
    process-wide one)."""
    registry = Registry.from_entry_points()
    registry.sources = {n: c for n, c in registry.sources.items()
                        if c.__module__.startswith("guardian.")}
    return registry


def missing_keys(text: str) -> list[str]:
    data = parse_toml("guardian.toml", uncommented(text))
    return sorted(".".join(k) for k in config_keys(_registry()) if not listed(data, k))


def test_the_shipped_config_lists_every_section_and_key() -> None:
    """Before: no [service] (rules, dry_run, state_file, audit_log, apply_timeout,
    [service.metrics]), no [fleet], no [sources.processes], and [holds.kube], kmsg's
    lookback, the journal's uids and a dozen more missing, while docs/service.md said it
    listed every key."""
    pytest.importorskip("lightkube")  # [fleet] and [holds.kube] are the k8s extra's
    missing = missing_keys(SHIPPED.read_text())
    assert not missing, "systemd/guardian.toml does not list: " + ", ".join(missing)


def test_a_key_left_out_is_named() -> None:
    pytest.importorskip("lightkube")
    text = SHIPPED.read_text()
    assert re.search(r"^textfile = ", text, re.M) and re.search(r"^# ttl = ", text, re.M)
    text = re.sub(r"^textfile = .*\n", "", text, flags=re.M)
    text = re.sub(r"^# ttl = .*\n", "", text, flags=re.M)
    assert missing_keys(text) == ["fleet.ttl", "service.metrics.textfile"]


def test_the_commented_examples_load(tmp_path: Path) -> None:
    """Every commented section and key, set, is a valid configuration: an example cannot
    name a key or a value the loader refuses."""
    pytest.importorskip("lightkube")
    path = tmp_path / "guardian.toml"
    path.write_text(uncommented(SHIPPED.read_text()))
    config = load_config(path, _registry())
    assert config.fleet is not None and config.holds.kube is not None
    assert set(config.sources) == set(_registry().sources)


def test_dry_run_is_a_visible_key_of_service() -> None:
    """Another change decides its value as shipped; the key stays set, where an operator
    looks for it."""
    assert "dry_run" in parse_toml("guardian.toml", SHIPPED.read_text())["service"]
