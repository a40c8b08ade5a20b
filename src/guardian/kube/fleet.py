"""The fleet-wide disruption budget: at most N nodes (or P% of them) *disrupted* at once,
counted in coordination.k8s.io Lease objects (kured's lock, counted) and in the nodes
themselves.

A node takes a slot (one Lease) before the first disruptive action of a ``fleet = true``
rule and holds it, renewing the Lease well inside its TTL, until every rule that took it
has resolved and its clean-up has run; only then is the slot given back. A node that is
cordoned or carries guardian's condition counts as disrupted whether or not it holds a
Lease, and as not healthy for ``min_healthy`` (medik8s' minHealthy). A slot whose holder
died expires after its TTL; a restarted guardian finds its own slot again.

Expiry is judged as client-go's leader election judges it: by how long *this* observer
has seen a Lease's record unchanged, on its own monotonic clock, never by comparing the
holder's ``renewTime`` with the local wall clock (a holder whose clock is 20 minutes slow
would lose a slot it still renews; one a year fast that died would keep it a year).

A slot never expires under a holder that is a node of the cluster and not Ready: a node
that rebooted (``node.reboot``, drained or not) cannot renew while it is down, and its
slot is what keeps a second node from going down under a budget of one. It is kept until
the node is back and Ready, where its restarted guardian takes it up again (or, with no
guardian there, it expires a TTL after the node was last seen down). A holder no longer
among the nodes (deleted) loses it after its TTL as before.

A node group with a budget of its own (``[[group]]`` with ``max_nodes``, ``max_percent``
or ``min_healthy``) has its own pool of slots, ``<name>-<group>-slot-<i>``, counted
among the group's nodes (read from the same list of the nodes); a node of that group
takes its slot there, and only when ``[fleet]``'s budget, over every node, admits it too
(:func:`guardian.model.budget.admit`). A node in no group with a budget takes
``<name>-slot-<i>``. Every pool's live slots count as disrupted nodes fleet-wide.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence

from lightkube import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from pydantic import Field, field_validator

from guardian.kube.actions import API_ERRORS, _why
from guardian.kube.client import KubeParams, make_client, node_name
from guardian.model import budget
from guardian.model.breaker import BreakerParams
from guardian.model.nodegroups import NodeGroup, count_or_percent

log = logging.getLogger("guardian.fleet")


#: the Role ``guardian-fleet`` of deploy/kubernetes/rbac.yaml grants get and update on
#: these Leases alone, by name (RBAC's resourceNames take no wildcard): [fleet]'s slots
#: under its shipped name and max_nodes (configmap.yaml); tests/system/test_daemonset.py
#: holds the two to each other
SHIPPED_ROLE_LEASES = tuple(f"guardian-slot-{i}" for i in range(10))


def slot_prefix(name: str, group: str | None = None) -> str:
    """The name of a pool's slots' Leases before ``-<i>``: ``<name>-slot`` for
    ``[fleet]``'s pool, ``<name>-<group>-slot`` for a node group's own."""
    return f"{name}-slot" if group is None else f"{name}-{group}-slot"


def role_gaps(params: FleetParams, groups: Sequence[NodeGroup],
              granted: Sequence[str] = SHIPPED_ROLE_LEASES) -> list[tuple[int | None, str]]:
    """The slots' Leases of each pool (``[fleet]``'s, a ``[[group]]``'s own) that a Role
    granting get and update on ``granted`` alone does not name: (the index of the
    group, None for ``[fleet]``; the names, with the setting that makes them)."""
    out: list[tuple[int | None, str]] = []
    assert params.max_nodes is not None  # TOML cannot unset it
    names = [n for n in (f"{slot_prefix(params.name)}-{i}" for i in range(params.max_nodes))
             if n not in granted]
    if names:
        out.append((None, f"{_span(names)} ([fleet] max_nodes = {params.max_nodes})"))
    for i, g in enumerate(groups):
        own = budget.Limits.of(g)
        if own is None:
            continue
        prefix, said = slot_prefix(params.name, g.name), f"[[group]] {g.name!r}"
        if own.max_nodes is None and own.max_percent is not None:
            out.append((i, f"{prefix}-0, -1, ... (as many as {said} max_percent = "
                           f"{own.max_percent:g} of its nodes allows; max_nodes bounds them)"))
            continue
        count = own.max_nodes or 1  # min_healthy alone: one slot
        names = [n for n in (f"{prefix}-{k}" for k in range(count)) if n not in granted]
        if names:
            out.append((i, f"{_span(names)} ({said} " + (
                f"max_nodes = {count})" if own.max_nodes else "min_healthy alone: one)")))
    return out


def role_warning(gaps: Sequence[tuple[int | None, str]],
                 granted: Sequence[str] = SHIPPED_ROLE_LEASES) -> str:
    """:func:`role_gaps` in words: what a Role that does not name them does."""
    return (f"the fleet budget's slots {', '.join(g for _, g in gaps)} are Leases that "
            "the Role guardian-fleet of deploy/kubernetes/rbac.yaml does not grant (get "
            f"and update on {_span(list(granted))} alone; resourceNames take no "
            "wildcard): under it, a count of the slots that reaches one is refused "
            "(403) and the fleet budget is unavailable on every node (each counts every "
            "pool's slots), so no fleet rule's disruptive action runs; add them to its "
            "resourceNames (docs/kubernetes.md, Node groups)")


def _span(names: list[str]) -> str:
    """Slot Lease names in few words: ``a-slot-0..9`` for a run of one pool's."""
    if len(names) == 1:
        return names[0]
    return f"{names[0]}..{names[-1].rpartition('-')[2]}"


class FleetParams(KubeParams):
    namespace: str = "kube-system"
    name: str = Field("guardian", description="Lease names: <name>-slot-<i>")
    max_nodes: int | None = Field(1, ge=1, description="nodes that may act at once")
    max_percent: float | None = Field(None, gt=0, le=100, description="or this share of "
                                      "the fleet (the smaller of the two when both)")
    min_healthy: str = Field("0", description="a count or a percentage (\"80%\") of nodes "
                             "that must be Ready for anyone to act")
    ttl: int = Field(600, ge=1, description="seconds after which a slot that its holder "
                     "stopped renewing expires; holders renew it every ttl/3")
    breaker: BreakerParams | None = Field(None, description="the correlated-failure "
                                          "breaker (guardian.kube.breaker): off unless set")
    condition_types: list[str] = Field(
        default_factory=lambda: ["GuardianProblem"],
        description="node conditions (status True) that mark a node as disrupted, as "
                    "kube.condition sets them")

    @field_validator("min_healthy")
    @classmethod
    def _count_or_percent(cls, v: str) -> str:
        return count_or_percent(v)


class FleetBudget:
    """This node's view of the fleet budget: hold a slot while disrupting, give it back
    after clean-up. ``clock`` gives the time written into Leases (tests simulate it);
    ``groups``: the config's node groups (those with a budget of their own have their own
    pool of slots)."""

    def __init__(self, params: FleetParams,
                 clock: Callable[[], dt.datetime] | None = None,
                 monotonic: Callable[[], float] | None = None,
                 groups: Sequence[NodeGroup] = ()) -> None:
        self.p = params
        self.groups = list(groups)
        self.limits = budget.Limits(params.max_nodes, params.max_percent, params.min_healthy)
        self.me = node_name(params)
        self.client = make_client(params)
        self.clock = clock or (lambda: dt.datetime.now(dt.timezone.utc))
        # a simulated wall clock drives the observer's clock too, unless one is given
        self.monotonic = monotonic or (time.monotonic if clock is None
                                       else lambda: self.clock().timestamp())
        # slot -> (its record as last seen: holder and renewTime, when this node saw it
        # change, on its own monotonic clock)
        self.observed: dict[str, tuple[tuple[str, str], float]] = {}
        self.slot: str | None = None
        self.holders: set[str] = set()  # rules that disrupt under the held slot
        self.renewed: dt.datetime | None = None
        self.adopted = False  # a slot held from before a restart looked for

    # -- what the executor calls ---------------------------------------------------------
    def hold(self, rule: str) -> tuple[str | None, str]:
        """The slot this node holds for ``rule`` (taken now if needed), or None and why."""
        if self.slot is None:
            slot, why = self.acquire()
            if slot is None:
                return None, why
            self.slot, self.renewed = slot, self.clock()
        self.holders.add(rule)
        return self.slot, ""

    def done(self, rule: str) -> None:
        """``rule`` resolved and its clean-up ran; the last such rule gives the slot back
        (also one a previous run of guardian took and this one found again)."""
        self.holders.discard(rule)
        if self.holders:
            return
        slot = self.slot or self._mine()
        if slot is not None:
            self.release(slot)
        self.slot = self.renewed = None

    def renew(self) -> None:
        """Keep the held slot's Lease fresh (every ttl/3), so it never expires under a
        node that is still disrupted. A slot lost to another node is dropped. At the first
        call, a slot this node still holds from before a restart (a reboot held across
        by node.reboot) is taken up again: renewed until a fleet rule's clean-up gives it
        back."""
        if not self.adopted:
            try:  # an unreachable API: looked for again at the next tick
                mine = self._adopt() if self.slot is None else None
                self.adopted = True
            except API_ERRORS as exc:
                log.warning("fleet budget: cannot look for a slot held from before a "
                            "restart: %s", _why(exc))
                return
            if mine is not None:
                log.info("fleet budget: slot %s is still this node's (from before a "
                         "restart): kept until a fleet rule resolves", mine)
                self.slot = mine
                self.renewed = self.clock() - dt.timedelta(seconds=self.p.ttl)
        if self.slot is None or self.renewed is None:
            return
        now = self.clock()
        if now - self.renewed < dt.timedelta(seconds=self.p.ttl / 3):
            return
        try:
            lease = self.client.get(Lease, name=self.slot, namespace=self.p.namespace)
            if not lease.spec or lease.spec.holderIdentity != self.me:
                log.error("fleet budget: slot %s is no longer held by this node", self.slot)
                self.slot = self.renewed = None
                return
            lease.spec.renewTime = now
            self.client.replace(lease)
            self.renewed = now
        except API_ERRORS as exc:
            log.warning("fleet budget: cannot renew slot %s: %s", self.slot, _why(exc))

    # -- the budget ----------------------------------------------------------------------
    def _survey(self) -> tuple[list[Node], dict[str, str]]:
        """The nodes, and the live slots' holders of every pool."""
        nodes = list(self.client.list(Node))
        down = {_name(n) for n in nodes if not _ready(n)}
        holders: dict[str, str] = {}
        for prefix, count in self._pools(nodes).values():
            holders.update(self._holders(prefix, count, down))
        return nodes, holders

    def _pools(self, nodes: list[Node]) -> dict[str | None, tuple[str, int]]:
        """Each pool of slots (None: [fleet]'s; else a node group with a budget of its
        own): its Leases' name prefix and how many slots it has among ``nodes``."""
        out: dict[str | None, tuple[str, int]] = {None: (
            slot_prefix(self.p.name), budget.slots(len(nodes), self.p.max_nodes,
                                                self.p.max_percent))}
        labels = _labels(nodes)
        for g in self.groups:
            own = budget.Limits.of(g)
            if own is not None:
                n = len(budget.members(g, labels, self.groups))
                out[g.name] = (slot_prefix(self.p.name, g.name),
                               budget.slots(n, own.max_nodes, own.max_percent))
        return out

    def _pool(self, nodes: list[Node]) -> tuple[str, int]:
        """This node's pool: its group's, where that has a budget of its own (a node
        not listed, whose group cannot be told, is refused by the verdict first)."""
        mine = _labels(nodes).get(self.me) or {}
        group = budget.budget_group(mine, self.groups)
        return self._pools(nodes)[group.name if group is not None else None]

    def _limits(self) -> tuple[int, str]:
        """(this node's pool's slots, reason not to act or "")."""
        nodes, holders = self._survey()
        why = self._verdict(nodes, holders)
        return (0, why) if why else (self._pool(nodes)[1], "")

    def _verdict(self, nodes: list[Node], holders: dict[str, str]) -> str:
        """Why this node may not start disrupting now, or "": [fleet]'s budget and its
        node group's own (:func:`guardian.model.budget.admit`)."""
        return budget.admit(self.me, _labels(nodes), {_name(n) for n in nodes if _ready(n)},
                            self._disrupted(nodes, holders), self.limits, self.groups)

    def _disrupted(self, nodes: list[Node], holders: dict[str, str]) -> set[str]:
        """Nodes that hold a live slot, are cordoned, or carry guardian's condition."""
        out = set(holders.values())
        for n in nodes:
            if (n.spec and n.spec.unschedulable) or any(
                    c.type in self.p.condition_types and c.status == "True"
                    for c in ((n.status and n.status.conditions) or [])):
                out.add(_name(n))
        return out

    def _holders(self, prefix: str, count: int, down: set[str]) -> dict[str, str]:
        """Slot name -> holder, for the pool's first ``count`` slots, held and not
        expired (a holder among ``down``, the nodes not Ready, keeps its slot)."""
        out: dict[str, str] = {}
        for i in range(count):
            name = f"{prefix}-{i}"
            try:
                lease = self.client.get(Lease, name=name, namespace=self.p.namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    continue
                raise
            if self._live(name, lease, down):
                assert lease.spec is not None and lease.spec.holderIdentity
                out[name] = lease.spec.holderIdentity
        return out

    def _live(self, name: str, lease: Lease, down: set[str]) -> bool:
        """Whether the slot is held: its holder has changed its record within its TTL, as
        this node has watched it (a record first seen now counts as just renewed), or
        the holder is a node that is not Ready (``down``: rebooting, say)."""
        held = lease.spec
        if not held or not held.holderIdentity:
            self.observed.pop(name, None)
            return False
        record = (held.holderIdentity, str(held.renewTime))
        now = self.monotonic()
        seen = self.observed.get(name)
        if seen is None or seen[0] != record or held.holderIdentity in down:
            # a holder down (rebooting) counts as renewing: back and Ready, its guardian
            # has a whole TTL to start and take its slot up again
            self.observed[name] = (record, now)
            return True
        return now - seen[1] < (held.leaseDurationSeconds or self.p.ttl)

    def _mine(self) -> str | None:
        try:
            _, holders = self._survey()
        except API_ERRORS:
            return None
        return self._own(holders)

    def _adopt(self) -> str | None:
        """The slot this node still holds from before a restart, if any: one list of the
        namespace's Leases (a handful: the slots and the breaker's latches) finds
        whether any slot of any pool names this node; only then are the nodes surveyed
        to judge it as :meth:`acquire` does (before, every node's start listed every
        Node: a DaemonSet rollout of 1,000 nodes read 0.9 GB). Where Leases may not be
        listed (403: a Role without ``list``), the survey alone, as before."""
        try:
            leases = self.client.list(Lease, namespace=self.p.namespace)
            named = any(lease.spec and lease.spec.holderIdentity == self.me
                        and self._slot_name((lease.metadata and lease.metadata.name) or "")
                        for lease in leases)
        except ApiError as exc:
            if exc.status.code != 403:
                raise
            named = True
        return self._own(self._survey()[1]) if named else None

    def _slot_name(self, name: str) -> bool:
        """Whether ``name`` is a slot's Lease of any pool (``<name>-slot-<i>``,
        ``<name>-<group>-slot-<i>``)."""
        prefix, _, index = name.rpartition("-")
        pools = {slot_prefix(self.p.name), *(slot_prefix(self.p.name, g.name)
                                          for g in self.groups if g.has_budget)}
        return index.isdigit() and prefix in pools

    def _own(self, holders: dict[str, str]) -> str | None:
        """The slot among ``holders`` that this node holds, if any."""
        return next((s for s, h in holders.items() if h == self.me), None)

    def acquire(self) -> tuple[str | None, str]:
        """A slot's Lease name (this node's own, if it already holds one), or None and
        why not."""
        try:
            nodes, holders = self._survey()
            mine = self._own(holders)
            if mine is not None:
                return mine, ""
            why = self._verdict(nodes, holders)
            if why:
                return None, f"fleet budget: {why}"
            down = {_name(n) for n in nodes if not _ready(n)}
            prefix, slots = self._pool(nodes)
            for i in range(slots):
                name = f"{prefix}-{i}"
                if name not in holders and self._take(name, down):
                    # a node cordoned meanwhile, without a slot, may have used up the budget
                    # (or, under node groups' own budgets, one of another pool took the
                    # fleet-wide budget's last room)
                    try:
                        _, why = self._limits()
                    except API_ERRORS as exc:
                        why = f"cannot recount after taking a slot: {_why(exc)}"
                    if why:
                        self.release(name)
                        return None, f"fleet budget: {why}"
                    return name, ""
        except API_ERRORS as exc:
            return None, f"fleet budget unavailable: {_why(exc)}"
        return None, f"fleet budget: all {slots} slot(s) held by other nodes"

    def _take(self, name: str, down: set[str]) -> bool:
        now = self.clock()
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
        if self._live(name, lease, down) and lease.spec is not None \
                and lease.spec.holderIdentity != self.me:
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
        """Give a slot back (if this node holds it); a write that lost a race with another
        node's read is tried again with the fresh object."""
        for _ in range(5):
            try:
                lease = self.client.get(Lease, name=name, namespace=self.p.namespace)
                if not lease.spec or lease.spec.holderIdentity != self.me:
                    return
                lease.spec.holderIdentity = None
                self.client.replace(lease)
                return
            except ApiError as exc:
                if exc.status.code != 409:
                    break
            except API_ERRORS:
                break
        log.warning("fleet budget: could not give slot %s back; it expires after %ds",
                    name, self.p.ttl)


def _ready(n: Node) -> bool:
    return any(c.type == "Ready" and c.status == "True"
               for c in ((n.status and n.status.conditions) or []))


def _name(n: Node) -> str:
    return (n.metadata and n.metadata.name) or ""


def _labels(nodes: list[Node]) -> dict[str, dict[str, str] | None]:
    """Each node's name and labels."""
    return {_name(n): dict((n.metadata and n.metadata.labels) or {}) for n in nodes}
