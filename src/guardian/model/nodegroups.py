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
max_nodes = 2                # its own fleet budget, counted among its nodes (and the
min_healthy = "90%"          # [fleet] budget must admit too: guardian.model.budget)
```
A node is in the first group whose labels all match its own (the order of the tables),
or in none (then every rule acts as its own ``mode`` says). A node whose labels are not
known (its Node object not read yet, or nothing reads it) cannot be placed: a decision's
disruptive actions run in shadow until they are (it must not act as if in the wrong
group), its other actions run (the executor asks :func:`shadow_why` of each part).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: what a Lease's name may hold of a group's name (a DNS subdomain's characters): the
#: name of a group with its own budget is part of its slots' Lease names
LEASE_SAFE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


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
    max_nodes: int | None = Field(None, ge=1, description="this group's own fleet "
                                  "budget: its nodes that may be disrupted at once "
                                  "(unset, with max_percent and min_healthy unset: the "
                                  "group has no budget of its own, [fleet]'s counts it)")
    max_percent: float | None = Field(None, gt=0, le=100, description="or this share "
                                      "of the group's nodes (the smaller of the two when "
                                      "both)")
    min_healthy: str | None = Field(None, description="a count or a percentage (\"80%\") "
                                    "of the group's nodes that must be Ready and "
                                    "undisrupted for one of them to start disrupting")

    @field_validator("min_healthy")
    @classmethod
    def _count_or_percent(cls, v: str | None) -> str | None:
        return None if v is None else count_or_percent(v)

    @model_validator(mode="after")
    def _lease_safe(self) -> NodeGroup:
        if self.has_budget and not LEASE_SAFE.match(self.name):
            raise ValueError("a node group with its own budget has its name in its slots' "
                             "Lease names: lower-case letters, digits, '-' and '.' only, "
                             "beginning and ending with a letter or digit")
        return self

    @property
    def has_budget(self) -> bool:
        """Whether the group counts its own fleet budget (any of its three set)."""
        return not (self.max_nodes is None and self.max_percent is None
                    and self.min_healthy is None)


def count_or_percent(v: str) -> str:
    """``min_healthy``'s value checked: a count (``"3"``) or a percentage (``"80%"``)."""
    n = v[:-1] if v.endswith("%") else v
    if not n.replace(".", "", 1).isdigit():
        raise ValueError(f"min_healthy {v!r}: expected a count or a percentage")
    return v


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


def shadowed_by(group: NodeGroup, before: Sequence[NodeGroup]) -> NodeGroup | None:
    """The first of the groups ``before`` ``group`` that every node carrying ``group``'s
    labels is in first (its labels a subset of ``group``'s: no labels selects every
    node), so ``group`` is never reached; None when it can be."""
    mine = set(group.labels.items())
    return next((g for g in before if set(g.labels.items()) <= mine), None)


def unreachable(group: NodeGroup, first: NodeGroup) -> str:
    """Why ``group`` is never reached, ``first`` (:func:`shadowed_by`) coming before it."""
    said = f"node group {group.name!r} is never reached (a node is in the first group " \
           f"that matches): "
    if not first.labels:
        return said + (f"node group {first.name!r} before it has no labels, so every node "
                       "is in it; a group without labels may only be the last")
    pairs = ",".join(f"{k}={v}" for k, v in first.labels.items())
    if first.labels == group.labels:
        return said + f"node group {first.name!r} before it has the same labels ({pairs})"
    return said + (f"every node it selects carries the labels of node group "
                   f"{first.name!r} ({pairs}), which comes first: put {group.name!r} "
                   "before it")


def unmatched(group: NodeGroup, names: Collection[str]) -> list[tuple[int, str]]:
    """Each entry of ``group``'s ``rules`` (its index and pattern) that matches none of
    the rules ``names``: the rule it meant, if any, runs in shadow on the group's nodes."""
    return [(k, p) for k, p in enumerate(group.rules)
            if not any(fnmatchcase(n, p) for n in names)]


def shadow_why(rule: str | None, disruptive: bool, labels: Mapping[str, str] | None,
               groups: Sequence[NodeGroup]) -> str:
    """Why ``rule``'s decision must run in shadow on a node with ``labels`` (None:
    not known), or "" when it acts as the rule says. ``disruptive``: the decision would
    run a disruptive action. ``rule`` None: an action run by hand (``guardian act``),
    outside any rule: the group's mode applies, not its ``rules``."""
    if not groups:
        return ""
    if labels is None:
        if not disruptive:
            return ""
        return ("this node's labels are not known (its Node object not read yet, or "
                "nothing reads it: set [node] labels, or [holds.kube] with its annotation, "
                "or [fleet.breaker]), so its node group cannot be told"
                + (": a disruptive action runs in shadow" if rule is not None else ""))
    group = group_of(labels, groups)
    if group is None:
        return ""
    if group.mode == "shadow":
        return f"node group {group.name} is in shadow mode"
    if rule is not None and not any(fnmatchcase(rule, p) for p in group.rules):
        return f"rule {rule} does not act in node group {group.name} (its rules: " \
               f"{', '.join(group.rules)})"
    return ""
