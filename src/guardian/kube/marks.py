"""Taints and labels guardian puts on its node, under its own key prefix and claimed for
the rule (see :mod:`.owned`), removed when the rule resolves.

Patches as ``kubectl taint`` makes them (kubectl pkg/cmd/taint/taint.go: a strategic
merge patch of the whole ``spec.taints``, since NodeSpec.taints has no patch strategy and
a list is replaced), plus the read's resourceVersion so that a taint someone else added
meanwhile is not dropped; labels are a map, merged key by key (null deletes)."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from lightkube.resources.core_v1 import Node
from pydantic import Field, field_validator

from guardian.kube import owned
from guardian.kube.actions import OwnedNodeAction
from guardian.kube.client import KubeParams
from guardian.plugin.contract import ActionContext

# a qualified name's name part (k8s.io/apimachinery validation IsQualifiedName)
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# a label value (IsValidLabelValue); a taint's value has the same syntax
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _key(key: str | None, rule: str) -> str:
    out = key or owned.PREFIX + rule
    name = out.removeprefix(owned.PREFIX)
    if not out.startswith(owned.PREFIX) or not _NAME.match(name):
        raise owned.Refused(f"{out!r} is not a key under {owned.PREFIX} (a name of at most "
                            f"63 letters, digits, '-', '_' or '.'; say `key`)")
    return out


def _guardian_key(v: str | None) -> str | None:
    if v is not None:
        _key(v, "")
    return v


class TaintParams(KubeParams):
    key: str | None = Field(None, description=f"the taint's key, under {owned.PREFIX} "
                            f"(default: {owned.PREFIX}<rule>)")
    value: str = Field("", max_length=63, pattern=_VALUE.pattern)
    effect: Literal["NoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="NoExecute also evicts the pods that do not tolerate it")

    _check_key = field_validator("key")(_guardian_key)


class Taint(owned.Thing):
    def __init__(self, key: str, value: str, effect: str) -> None:
        self.tkey, self.value, self.effect = key, value, effect
        self.key = f"taint:{key}:{effect}"
        self.what = f"taint {key}{'=' + value if value else ''}:{effect}"

    def _taints(self, node: Node) -> list[dict[str, Any]]:
        return [{k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect),
                                   ("timeAdded", t.timeAdded)) if v is not None}
                for t in (node.spec and node.spec.taints) or []]

    def _mine(self, t: dict[str, Any]) -> bool:
        # kubectl's Taint.MatchTaint: the same key and effect
        return bool(t["key"] == self.tkey and t["effect"] == self.effect)

    def present(self, node: Node) -> bool:
        return any(self._mine(t) for t in self._taints(node))

    def add(self, node: Node) -> dict[str, Any]:
        new: dict[str, Any] = {"key": self.tkey, "effect": self.effect}
        if self.value:
            new["value"] = self.value
        if self.effect == "NoExecute":  # TimeAdded "is only written for NoExecute taints"
            new["timeAdded"] = owned.now()
        return {"spec": {"taints": [*_wire(self._taints(node)), new]}}

    def remove(self, node: Node) -> dict[str, Any]:
        kept = [t for t in self._taints(node) if not self._mine(t)]
        return {"spec": {"taints": _wire(kept) or None}}


def _wire(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in taints:
        t = dict(t)
        if "timeAdded" in t and not isinstance(t["timeAdded"], str):
            t["timeAdded"] = t["timeAdded"].strftime("%Y-%m-%dT%H:%M:%SZ")
        out.append(t)
    return out


class KubeTaint(OwnedNodeAction[TaintParams]):
    """Taint this node with guardian's key (NoSchedule or NoExecute), claimed for the rule;
    with ``on = "both"`` the taint is removed when the rule resolves."""

    name: ClassVar[str] = "kube.taint"
    Params = TaintParams
    sets = True

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        p = self.params
        return [Taint(_key(p.key, ctx.rule), p.value, p.effect)]


class KubeUntaint(KubeTaint):
    """Drop the rule's claim on guardian's taint; remove it once no rule claims it."""

    name: ClassVar[str] = "kube.untaint"
    disruptive: ClassVar[bool] = False
    sets = False


class LabelParams(KubeParams):
    labels: dict[str, str] = Field(min_length=1, description=f"keys under "
                                   f"{owned.PREFIX}; values as Kubernetes allows")

    @field_validator("labels")
    @classmethod
    def _check(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            _key(k, "")
            if not _VALUE.match(val):
                raise ValueError(f"label {k}: {val!r} is not a label value")
        return v


class Label(owned.Thing):
    def __init__(self, key: str, value: str) -> None:
        self.lkey, self.value = key, value
        self.key, self.what = f"label:{key}", f"label {key}={value}"

    def _have(self, node: Node) -> str | None:
        return ((node.metadata and node.metadata.labels) or {}).get(self.lkey)

    def present(self, node: Node) -> bool:
        return self._have(node) is not None

    def conflict(self, node: Node) -> str:
        have = self._have(node)
        if have is None or have == self.value:
            return ""
        return f"label {self.lkey} is {have!r}, not {self.value!r}: left as it is"

    def add(self, node: Node) -> dict[str, Any]:
        return {"metadata": {"labels": {self.lkey: self.value}}}

    def remove(self, node: Node) -> dict[str, Any]:
        return {"metadata": {"labels": {self.lkey: None}}}


class KubeLabel(OwnedNodeAction[LabelParams]):
    """Label this node (keys under guardian's prefix), claimed for the rule; with
    ``on = "both"`` the labels are removed when the rule resolves. Not disruptive by
    itself; a DaemonSet or affinity that selects on the label makes it so."""

    name: ClassVar[str] = "kube.label"
    disruptive: ClassVar[bool] = False
    Params = LabelParams
    sets = True

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        return [Label(k, v) for k, v in sorted(self.params.labels.items())]
