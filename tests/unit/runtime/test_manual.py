"""guardian.runtime.manual: the rails an action run by hand (``guardian act``) is held to,
as the service would hold it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from guardian.model.holds import Hold
from guardian.model.nodegroups import NodeConfig, NodeGroup
from guardian.model.window import Window
from guardian.runtime.config import Config, EngineConfig, HoldsConfig, ServiceConfig
from guardian.runtime.holds import HoldFile
from guardian.runtime.manual import refusals


def _config(tmp_path: Path, window: Window | None = None, **more: object) -> Config:
    return Config(engine=EngineConfig(window=window),
                  service=ServiceConfig(state_file=str(tmp_path / "state.json")),
                  holds=HoldsConfig(dropin=str(tmp_path / "holds.d")), **more)


def test_nothing_refuses_without_holds_window_or_fleet(tmp_path: Path) -> None:
    assert refusals(_config(tmp_path), disruptive=True) == []


def test_a_hold_on_every_rule_refuses_any_action(tmp_path: Path) -> None:
    now = time.time()
    holds = HoldFile(tmp_path / "holds.json")  # beside the state file
    holds.write([Hold(now + 3600, "one rule", "ops", rule="r")])
    assert refusals(_config(tmp_path), disruptive=False, wall=now) == []
    holds.write([Hold(now + 3600, "freeze", "ops")])
    [why] = refusals(_config(tmp_path), disruptive=False, wall=now)
    assert why.startswith("a hold on every rule is in force (") and why.endswith("[cli]")


@pytest.mark.parametrize("disruptive", [True, False])
def test_a_closed_window_refuses_only_a_disruptive_action(tmp_path: Path,
                                                         disruptive: bool) -> None:
    monday_noon = 1764590400.0  # 2025-12-01T12:00:00Z
    closed = Window(days=["sun"])
    got = refusals(_config(tmp_path, closed), disruptive=disruptive, wall=monday_noon)
    assert got == ([f"outside the maintenance window ({closed.describe()})"]
                   if disruptive else [])


CANARY = NodeGroup(name="canary", labels={"guardian.io/canary": "true"}, mode="shadow",
                   rules=["other-*"])


@pytest.mark.parametrize(("labels", "disruptive", "said"), ids=[
    "shadow", "shadow-disruptive", "no-group", "unknown", "unknown-disruptive"], argvalues=[
    ({"guardian.io/canary": "true"}, False, "node group canary is in shadow mode"),
    ({"guardian.io/canary": "true"}, True, "node group canary is in shadow mode"),
    ({"pool": "cpu"}, True, ""),        # in no group
    (None, False, ""),                  # labels unknown: only a disruptive action
    (None, True, "this node's labels are not known (its Node object not read yet, or "
                 "nothing reads it: set [node] labels, or [holds.kube] with its "
                 "annotation, or [fleet.breaker]), so its node group cannot be told"),
])
def test_a_shadow_node_group_refuses_as_the_service_plans_only(
        tmp_path: Path, labels: dict[str, str] | None, disruptive: bool, said: str) -> None:
    """As the service runs a shadow group's decisions (a canary acts by hand only with
    --force); a group's ``rules`` name rules, and an action run by hand is none. Before:
    guardian act applied on a shadow canary."""
    config = _config(tmp_path, node=NodeConfig(labels=labels), groups=[CANARY])
    assert refusals(config, disruptive=disruptive) == ([said] if said else [])
