"""The fleet-wide disruption budget: a counted semaphore kept in coordination.k8s.io
Lease objects, so at most N nodes (or P% of them) act at once. Each slot is one Lease;
a node holds it while it acts and renews nothing: a slot whose holder died expires after
its TTL (kured's lock, counted). No action runs while fewer than ``min_healthy`` nodes are
Ready (medik8s' minHealthy)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from lightkube import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from pydantic import Field, field_validator

from .actions import API_ERRORS, _why
from .client import KubeParams, make_client, node_name


class FleetParams(KubeParams):
    namespace: str = "kube-system"
    name: str = Field("guardian", description="Lease names: <name>-slot-<i>")
    max_nodes: int | None = Field(1, ge=1, description="nodes that may act at once")
    max_percent: float | None = Field(None, gt=0, le=100, description="or this share of "
                                      "the fleet (the smaller of the two when both)")
    min_healthy: str = Field("0", description="a count or a percentage (\"80%\") of nodes "
                             "that must be Ready for anyone to act")
    ttl: int = Field(600, ge=1, description="seconds after which a held slot expires")

    @field_validator("min_healthy")
    @classmethod
    def _count_or_percent(cls, v: str) -> str:
        n = v[:-1] if v.endswith("%") else v
        if not n.replace(".", "", 1).isdigit():
            raise ValueError(f"min_healthy {v!r}: expected a count or a percentage")
        return v


def _time(t: Any) -> dt.datetime | None:
    if t is None:
        return None
    if isinstance(t, dt.datetime):
        return t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(str(t).replace("Z", "+00:00"))


class FleetBudget:
    """Take and give back slots of the fleet budget for this node."""

    def __init__(self, params: FleetParams) -> None:
        self.p = params
        self.me = node_name(params)
        self.client = make_client(params)

    def _now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def _limits(self) -> tuple[int, str]:
        """(slots, reason not to act or "")."""
        nodes = list(self.client.list(Node))
        ready = sum(1 for n in nodes if any(
            c.type == "Ready" and c.status == "True"
            for c in ((n.status and n.status.conditions) or [])))
        want = self.p.min_healthy
        need = math.ceil(len(nodes) * float(want[:-1]) / 100) if want.endswith("%") \
            else int(float(want))
        if ready < need:
            return 0, f"only {ready} of {len(nodes)} nodes Ready, below min_healthy {want}"
        slots = [n for n in (self.p.max_nodes, math.floor(len(nodes) * self.p.max_percent / 100)
                             if self.p.max_percent else None) if n is not None]
        return max(1, min(slots)) if slots else 1, ""

    def acquire(self) -> tuple[str | None, str]:
        """A slot's Lease name, or None and why not."""
        try:
            slots, why = self._limits()
            if why:
                return None, f"fleet budget: {why}"
            for i in range(slots):
                name = f"{self.p.name}-slot-{i}"
                if self._take(name):
                    return name, ""
        except API_ERRORS as exc:
            return None, f"fleet budget unavailable: {_why(exc)}"
        return None, f"fleet budget: all {slots} slot(s) held by other nodes"

    def _take(self, name: str) -> bool:
        now = self._now()
        spec = LeaseSpec(holderIdentity=self.me, leaseDurationSeconds=self.p.ttl,
                         acquireTime=now, renewTime=now)
        try:
            lease = self.client.get(Lease, name=name, namespace=self.p.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            try:
                self.client.create(Lease(metadata=ObjectMeta(name=name,
                                                             namespace=self.p.namespace),
                                         spec=spec), namespace=self.p.namespace)
                return True
            except ApiError as exc2:
                if exc2.status.code == 409:
                    return False  # another node created it first
                raise
        held = lease.spec
        if held and held.holderIdentity and held.holderIdentity != self.me:
            renewed = _time(held.renewTime)
            ttl = held.leaseDurationSeconds or self.p.ttl
            if renewed and renewed + dt.timedelta(seconds=ttl) > now:
                return False  # held, and not expired
        lease.spec = spec
        try:
            self.client.replace(lease)  # checked against its resourceVersion: 409 if stale
            return True
        except ApiError as exc:
            if exc.status.code == 409:
                return False  # another node took it between our read and write
            raise

    def release(self, name: str) -> None:
        try:
            lease = self.client.get(Lease, name=name, namespace=self.p.namespace)
            if lease.spec and lease.spec.holderIdentity == self.me:
                lease.spec.holderIdentity = None
                self.client.replace(lease)
        except API_ERRORS:
            pass  # it expires after its TTL anyway
