"""JSON Schemas of guardian's TOML files for editors and validators (taplo,
check-jsonschema): rule files, rule-test files and ``guardian.toml``, generated from the
models the loaders validate with and from the registry, plugins included, so a misspelled
action name or parameter is flagged before guardian ever reads the file; and of a line of
the audit log, from its records' models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from guardian.core.audit import audit_schema
from guardian.model.nodegroups import NodeConfig, NodeGroup
from guardian.model.schema import ActionSpec, RuleFile
from guardian.model.testfile import test_file_schema
from guardian.plugin.registry import Registry, default_registry
from guardian.runtime.config import EngineConfig, EvidenceConfig, HoldsConfig, ServiceConfig

DRAFT = "https://json-schema.org/draft/2020-12/schema"
KINDS = ("rules", "tests", "config", "audit")


def _inline(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    """``model``'s schema, its definitions moved into ``defs``."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs.update(schema.pop("$defs", {}))
    return schema


def _action_schemas(reg: Registry, defs: dict[str, Any]) -> list[dict[str, Any]]:
    """One schema per registered action: ``use`` fixed to its name, the common keys
    (on, hold) and its parameters, nothing else."""
    common = _inline(ActionSpec, defs)["properties"]
    out = []
    for name in sorted(reg.actions):
        cls = reg.actions.get(name)
        if cls is None:  # a plugin that does not load (e.g. kube.* without the extra)
            continue
        params = _inline(cls.Params, defs)
        props = {**common, **params.get("properties", {}),
                 "use": {"const": name, "description": (cls.__doc__ or name).split("\n")[0]}}
        out.append({"title": name, "type": "object", "properties": props,
                    "required": ["use", *params.get("required", [])],
                    "additionalProperties": False})
    return out


def rule_file_schema(registry: Registry | None = None) -> dict[str, Any]:
    """A rule file; each ``[[rule.action]]`` is one of the registered actions, keyed on
    ``use``."""
    reg = registry or default_registry()
    schema = RuleFile.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    actions = _action_schemas(reg, defs)
    names = [a["title"] for a in actions]
    defs["ActionSpec"] = {
        "type": "object", "required": ["use"],
        "properties": {"use": {"enum": names, "description": "a registered action"}},
        # the schema whose `use` matches decides the rest (an editor shows its keys)
        "allOf": [{"if": {"properties": {"use": {"const": a["title"]}}, "required": ["use"]},
                   "then": a} for a in actions],
    }
    return {"$schema": DRAFT, "title": "guardian rule file", **schema}


def rule_test_schema(registry: Registry | None = None) -> dict[str, Any]:
    """A rule-test file, with the sample tables of the sources that offer them."""
    reg = registry or default_registry()
    samples = {name: cls.sample_schema() for name, cls in sorted(reg.sources.items())
               if cls.offers_samples}
    return {"$schema": DRAFT, "title": "guardian rule-test file", **test_file_schema(samples)}


def config_schema(registry: Registry | None = None) -> dict[str, Any]:
    """``guardian.toml``: engine, service, each source's table, the fleet budget and the
    node groups."""
    reg = registry or default_registry()
    defs: dict[str, Any] = {}
    sources: dict[str, Any] = {
        "disabled": {"type": "array", "items": {"enum": sorted(reg.sources)},
                     "description": "sources not to run"}}
    for name, cls in sorted(reg.sources.items()):
        sources[name] = _inline(cls.Config, defs)
    props: dict[str, Any] = {
        "engine": _inline(EngineConfig, defs),
        "service": _inline(ServiceConfig, defs),
        "sources": {"type": "object", "properties": sources, "additionalProperties": False},
        "holds": _inline(HoldsConfig, defs),
        "evidence": _inline(EvidenceConfig, defs),
        "node": _inline(NodeConfig, defs),
        "group": {"type": "array", "items": _inline(NodeGroup, defs),
                  "description": "[[group]]: node groups, the first whose labels match"},
    }
    try:
        from guardian.kube.fleet import FleetParams
        from guardian.kube.holds import KubeHoldsParams
    except ImportError:  # without the Kubernetes extra there is no [fleet]
        props["holds"]["properties"].pop("kube", None)
    else:
        props["fleet"] = _inline(FleetParams, defs)
        props["holds"]["properties"]["kube"] = _inline(KubeHoldsParams, defs)
    return {"$schema": DRAFT, "title": "guardian configuration (guardian.toml)",
            "type": "object", "properties": props, "additionalProperties": False,
            "$defs": defs}


def schema_for(kind: str, registry: Registry | None = None) -> dict[str, Any]:
    """The schema of ``kind``: one of :data:`KINDS`."""
    if kind == "audit":  # the audit log's lines: the same whatever the registry holds
        return audit_schema()
    return {"rules": rule_file_schema, "tests": rule_test_schema,
            "config": config_schema}[kind](registry)
