"""Node groups: one config for a mixed fleet, scoped by node labels (pure, no I/O).

```toml
[node]                       # outside Kubernetes: this node's labels (in a DaemonSet
labels = { pool = "gpu" }    # they are read from its Node object)

[[group]]
name = "canary"
labels = { "guardian.io/canary" = "true" }   # matchLabels: every pair must match
mode = "shadow"              # decisions recorded, actions planned and audited, none applied

[[group]]
name = "gpu"
labels = { "nvidia.com/gpu.present" = "true" }
rules = ["xid-*", "memcg-leak"]   # only these act here; the others run in shadow
```
A node is in the first group whose labels all match its own (the order of the tables),
or in none (then every rule acts as its own ``mode`` says). A node whose labels are not
known (its Node object not read yet, or nothing reads it) cannot be placed: its decisions
that would run a disruptive action run in shadow until they are (it must not act as if
in the wrong group).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class NodeGroup(BaseModel):
    """``[[group]]``: nodes picked by their labels, and how rules act on them."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    labels: dict[str, str] = Field(default_factory=dict, description="matchLabels: "
                                   "the node carries every one of these ({}: every node)")
    mode: Literal["act", "shadow"] = Field("act", description="shadow: every rule's "
                                           "actions are planned and audited, never applied")
    rules: list[str] = Field(default_factory=lambda: ["*"], description="the rules (names "
                             "or shell-style patterns) that act on this group's nodes; "
                             "the others run in shadow there")


class NodeConfig(BaseModel):
    """``[node]``: this node's labels where no Node object says them (systemd)."""

    model_config = ConfigDict(extra="forbid")
    labels: dict[str, str] | None = Field(None, description="this node's labels (in a "
                                          "DaemonSet, unset: read from its Node object)")


def matches(group: NodeGroup, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` carries every label of ``group``."""
    return all(labels.get(k) == v for k, v in group.labels.items())


def group_of(labels: Mapping[str, str], groups: Sequence[NodeGroup]) -> NodeGroup | None:
    """The first group whose labels ``labels`` carries, or None."""
    return next((g for g in groups if matches(g, labels)), None)


def shadow_why(rule: str, disruptive: bool, labels: Mapping[str, str] | None,
               groups: Sequence[NodeGroup]) -> str:
    """Why ``rule``'s decision must run in shadow on a node with ``labels`` (None:
    not known), or "" when it acts as the rule says. ``disruptive``: the decision would
    run a disruptive action."""
    if not groups:
        return ""
    if labels is None:
        return ("this node's labels are not known (its Node object not read yet, or "
                "nothing reads it: set [node] labels, or [holds.kube] with its annotation, "
                "or [fleet.breaker]), so its node group cannot be told: a disruptive "
                "action runs in shadow" if disruptive else "")
    group = group_of(labels, groups)
    if group is None:
        return ""
    if group.mode == "shadow":
        return f"node group {group.name} is in shadow mode"
    if not any(fnmatchcase(rule, p) for p in group.rules):
        return f"rule {rule} does not act in node group {group.name} (its rules: " \
               f"{', '.join(group.rules)})"
    return ""
