"""The DaemonSet's rules are the shipped rules: deploy/kubernetes/rules.yaml (the ConfigMap
guardian-rules) and the unprivileged overlay's patch of it are what
deploy/generate_rules.py writes from rules/*.toml and deploy/kubernetes/rules-kubernetes.toml.
Before: a hand-made ConfigMap held 13 of the 55 shipped rules (unit-crashloop, the NIC,
softirq and DCGM rules among those left out), and its comment said to regenerate it by
hand."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from guardian.policy.loader import load_rules, rule_files
from tests.support.checkout import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEPLOY = REPO / "deploy"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_rules",
                                                  DEPLOY / "generate_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _data(path: Path) -> dict[str, str]:
    data: dict[str, str] = yaml.safe_load(path.read_text())["data"]
    return data


def _patched(data: dict[str, str]) -> dict[str, str]:
    out = dict(data)
    for op in yaml.safe_load((DEPLOY / "kubernetes-unprivileged" / "rules-patch.yaml")
                             .read_text()):
        assert op["op"] == "replace" and op["path"].startswith("/data/")
        key = op["path"].removeprefix("/data/")
        assert key in out, key
        out[key] = op["value"]
    return out


def _loaded(data: dict[str, str], tmp: Path) -> dict[str, Any]:
    """Rule name -> its parsed table, after the files load as the service loads them."""
    tmp.mkdir(exist_ok=True)
    for key, text in data.items():
        (tmp / key).write_text(text)
    names = [r.name for r in load_rules([tmp]).rules]
    tables = {r["name"]: r for text in data.values() for r in tomllib.loads(text)["rule"]}
    assert sorted(names) == sorted(tables)
    return tables


def _shipped() -> dict[str, Any]:
    return {r["name"]: r for p in rule_files([REPO / "rules"])
            for r in tomllib.loads(p.read_text())["rule"]}


def test_the_generated_files_are_current() -> None:
    stale = [str(path.relative_to(REPO)) for path, text in GEN.outputs().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, (f"{', '.join(stale)}: not what rules/ and rules-kubernetes.toml "
                       f"give; run `{GEN.COMMAND}`")


def test_every_shipped_rule_is_in_the_configmap_as_shipped(tmp_path: Path) -> None:
    """Every file and rule of rules/, each rule as shipped but for the actions (and
    keys) rules-kubernetes.toml adds: node-problem-detector's conditions and events."""
    data = _data(DEPLOY / "kubernetes" / "rules.yaml")
    assert sorted(data) == sorted(p.name for p in rule_files([REPO / "rules"]))
    got, shipped = _loaded(data, tmp_path / "rules"), _shipped()
    assert sorted(got) == sorted(shipped)
    added = {r["name"]: r for r in tomllib.loads(
        (DEPLOY / "kubernetes" / "rules-kubernetes.toml").read_text())["rule"]}
    for name, rule in got.items():
        extra = added.get(name, {})
        expect = {**shipped[name], **{k: v for k, v in extra.items() if k != "action"}}
        if "action" in shipped[name] or "action" in extra:  # (a ladder may have none)
            expect["action"] = shipped[name].get("action", []) + extra.get("action", [])
        assert rule == expect, name
    conditions = {a["type"] for r in got.values() for a in r.get("action", [])
                  if a["use"] == "kube.condition"}
    assert {"KernelDeadlock", "ReadonlyFilesystem", "XfsShutdown"} <= conditions


def test_the_unprivileged_rules_are_the_same_rules_without_privileged_actions(
        tmp_path: Path) -> None:
    full = _loaded(_data(DEPLOY / "kubernetes" / "rules.yaml"), tmp_path / "full")
    got = _loaded(_patched(_data(DEPLOY / "kubernetes" / "rules.yaml")),
                  tmp_path / "unprivileged")
    assert sorted(got) == sorted(full)
    for name, rule in got.items():
        if "action" not in full[name]:  # a ladder's steps: none privileged (shipped)
            assert rule == full[name], name
            assert not {a["use"] for s in rule.get("step", []) for a in s["action"]} & \
                set(GEN.PRIVILEGED_ACTIONS), name
            continue
        kept = [a for a in full[name]["action"] if a["use"] not in GEN.PRIVILEGED_ACTIONS]
        assert rule == {**full[name], "action": kept}, name
    # the shipped set has both: the overlay has something to drop
    assert {"memcg.release", "irq.move"} <= {a["use"] for r in full.values()
                                             for a in r.get("action", [])}


RULE = '''version = 1

[[rule]]
name = "a"
when = "x > 1"  # a comment

  [[rule.action]]
  use = "log"

  # about the next rule
[[rule]]
name = "b"
when = "x > 2"
'''


def test_additions_land_in_their_rule_and_a_misplaced_edit_is_refused() -> None:
    keys, actions = ["fleet = true\n"], ["  [[rule.action]]\n", '  use = "kube.event"\n']
    text, done = GEN.with_additions(RULE, {"a": (keys, actions)})
    assert done == {"a"}
    parsed = tomllib.loads(text)["rule"]
    assert parsed[0] == {"name": "a", "when": "x > 1", "fleet": True,
                         "action": [{"use": "log"}, {"use": "kube.event"}]}
    assert parsed[1] == {"name": "b", "when": "x > 2"}
    assert text.index("kube.event") < text.index("# about the next rule")
    # what the text edits made must read as intended: an action on the wrong rule is not
    with pytest.raises(GEN.GenerateError, match="does not read as intended"):
        GEN._check("x.toml", RULE, RULE + actions[0] + actions[1],
                   json.loads(json.dumps(tomllib.loads(RULE))))
