"""The correlated-failure breaker on a cluster (``[fleet.breaker]``): built on the Node
objects and Leases guardian already uses, no server of its own.

- Each node publishes the ``fleet = true`` rules whose condition holds on it (pending or
  firing), with the Unix time each began, on its own Node as the annotation
  ``guardian.io/firing`` (JSON ``{"rule": since}``), written only when that changes.
- A node on which such a rule began within the breaker's ``window`` judges the fleet
  (one list of the Nodes, at most every ``every``) with
  :func:`guardian.model.breaker.judge`, unless a latch of that rule already holds it:
  a wave's nodes stop listing the Nodes once their group is latched (every node that
  fires the rule unheld still judges, so any other group it trips is still found).
  Each (rule, group) pair over the bound is latched as a Lease
  ``<name>-breaker-<digest>`` in the fleet's namespace, created if absent: the node
  whose create succeeds (201) raises the one fleet-level signal (a Warning Event
  ``GuardianBreakerTripped`` on that Lease, and its log line); the others get 409.
- Every node lists the latches (one list of Leases by the label ``guardian.io/breaker``)
  at each read and holds the rule's disruptive actions where it is in the latch's group
  (a latched :class:`~guardian.model.holds.Hold`; ``why``, ``guardian holds`` and the
  metric ``guardian_breaker_tripped`` say so). A node whose own labels cannot be read is
  held by every latch of the rule (fail closed). A latch whose record cannot be read
  (in whole or in part) holds too, failing closed: the rule it names, else every rule's
  disruptive actions, in its group, else on every node; it is logged, and ``guardian
  breaker`` shows it.
- A latch never clears itself: ``guardian breaker release RULE --why TEXT`` deletes it
  and records who and why in an Event (``GuardianBreakerReleased``); ``kubectl -n NS
  delete lease -l guardian.io/breaker`` does the same without the record.

Everything is read and written off the loop, on the worker of
:class:`~guardian.kube.holds.KubeHolds`: the loop's :meth:`read` answers at once with the
latches last read, and :meth:`firing` only records what the loop saw.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node

from guardian.kube.actions import API_ERRORS, _why
from guardian.kube.client import make_client, no_credentials
from guardian.kube.fleet import FleetParams
from guardian.kube.holds import KubeHolds, KubeHoldsParams
from guardian.model.breaker import FLEET, BreakerParams, NodeFiring, Trip, judge, words
from guardian.model.holds import Hold

log = logging.getLogger("guardian.breaker")

FIRING = "guardian.io/firing"  # on each Node: {"rule": since}
LABEL = "guardian.io/breaker"  # on each latch: "tripped"
RECORD = "guardian.io/breaker"  # on each latch: the trip's numbers (JSON)
AUTHOR = "guardian breaker"


def latch_name(prefix: str, rule: str, group: str) -> str:
    """The Lease that latches ``rule`` tripped in ``group``."""
    digest = hashlib.sha256(f"{rule}\0{group}".encode()).hexdigest()[:12]
    return f"{prefix}-breaker-{digest}"


def in_group(group: str, labels: dict[str, str] | None) -> bool:
    """Whether a node with ``labels`` is in ``group`` (``fleet`` or ``key=value``); a
    node whose labels are unknown (None) is in every group: it fails closed."""
    if group == FLEET or labels is None:
        return True
    key, _, value = group.partition("=")
    return labels.get(key, "") == value


def parse_firing(text: str | None) -> dict[str, float]:
    """A node's ``guardian.io/firing`` annotation; what is not ``{rule: number}`` is
    left out (a node that wrote nonsense counts as firing nothing)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _words(record: dict[str, Any], rule: str, group: str) -> str:
    """What a latch's record says: said again from its numbers (a latch an older guardian
    wrote, its count named ``firing``, says them as this one does), else its ``why`` as
    written."""
    try:
        holding = int(record["holding"] if "holding" in record else record["firing"])
        nodes = int(record["nodes"])
        bound, window = float(record["bound"]), float(record["window"])
    except (KeyError, TypeError, ValueError, OverflowError):
        why = record.get("why", "")
        return why if isinstance(why, str) else ""
    where = "the fleet" if group == FLEET else group
    return words(holding, nodes, where, rule, window, bound)


def _stamp(t: float | None) -> str:
    if t is None:
        return "at a time its record does not say"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(v: object) -> float | None:
    """A Unix time that can be said (a finite number before the year 5138), else None."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    return float(v) if math.isfinite(v) and abs(v) < 1e11 else None


class Latch:
    """A tripped (rule, group), as its Lease says. A record that cannot be read in whole
    or in part (``problem`` says why; None when it can) still holds, failing closed: the
    rule it names, else every rule (``*``), in its group, else in every group."""

    def __init__(self, name: str, record: object, holder: str) -> None:
        self.name, self.holder = name, holder
        problems = []
        if not isinstance(record, dict):
            problems.append(f"its annotation {RECORD} is missing or not a JSON object")
            record = {}
        rule, group = record.get("rule"), record.get("group", FLEET)
        if not isinstance(rule, str) or not rule.strip():
            problems.append("it names no rule")
            rule = "*"
        if not isinstance(group, str) or (group != FLEET and "=" not in group):
            problems.append(f"its group {group!r} is neither {FLEET} nor KEY=VALUE")
            group = FLEET
        self.rule, self.group = rule, group
        self.at = _number(record.get("at"))
        if self.at is None and record:
            problems.append("it says no time")
        self.why = _words(record, rule, group)
        self.problem: str | None = "; ".join(problems) or None

    @property
    def holds_what(self) -> str:
        """``memcg-leak's disruptive actions`` or ``every rule's disruptive actions``."""
        return "every rule's disruptive actions" if self.rule == "*" else \
            f"{self.rule}'s disruptive actions"

    def hold(self, namespace: str) -> Hold:
        """The hold it is on this node: the rule's disruptive actions, until released."""
        delete = f"kubectl -n {namespace} delete lease {self.name}"
        if self.problem is not None:
            where = "every node" if self.group == FLEET else f"the nodes of {self.group}"
            release = "" if self.rule == "*" else \
                f"guardian breaker release {self.rule} --why TEXT, or "
            reason = (f"breaker latch {self.name} (node {self.holder}) cannot be read "
                      f"({self.problem}): it holds {self.holds_what} on {where}, failing "
                      f"closed, until a human removes it: {release}{delete}")
        else:
            reason = (f"breaker tripped {_stamp(self.at)} (node {self.holder}): {self.why}; "
                      f"until a human releases it: guardian breaker release {self.rule} "
                      f"--why TEXT (or {delete})")
        return Hold(math.inf, reason, AUTHOR, self.rule, (), f"breaker {self.group}",
                    latched=True)


def shares_reads(holds: KubeHoldsParams, fleet: FleetParams) -> bool:
    """Whether ``[holds.kube]`` reads the same node with the same credentials as
    ``[fleet]``: then one :class:`KubeBreaker` makes both readers' reads."""
    return all(getattr(holds, k) == getattr(fleet, k)
               for k in ("kubeconfig", "node", "service_account"))


class KubeBreaker(KubeHolds):
    """This node's part of the breaker: a reader of holds (the latches that cover this
    node) that also publishes this node's firing rules and trips latches; see the
    module. ``clock`` is the wall time (Unix seconds), ``monotonic`` paces the judging
    (tests simulate both). ``holds``: ``[holds.kube]`` where :func:`shares_reads`, whose
    reads (the ConfigMap, this node's hold and approval annotations) it makes too, from
    the same GET of this node a tick; its whole read is then bounded by the longer of the
    two timeouts."""

    reads_node = True  # its labels and guardian.io/firing, whatever ``holds`` reads

    def __init__(self, fleet: FleetParams, clock: Callable[[], float] | None = None,
                 monotonic: Callable[[], float] | None = None,
                 holds: KubeHoldsParams | None = None) -> None:
        assert fleet.breaker is not None
        timeout = min(fleet.timeout, 30.0)
        if holds is None:
            holds = KubeHoldsParams(
                kubeconfig=fleet.kubeconfig, node=fleet.node, timeout=timeout,
                service_account=fleet.service_account, namespace=fleet.namespace,
                configmap="", annotation="", approve_annotation="")
        else:
            assert shares_reads(holds, fleet)
            holds = holds.model_copy(update={"timeout": max(holds.timeout, timeout)})
        super().__init__(holds)
        self.last["breaker"] = []
        self.fleet = fleet
        self.bp: BreakerParams = fleet.breaker
        self.clock = clock or time.time
        self.monotonic = monotonic or (time.monotonic if clock is None else self.clock)
        self.onsets: dict[str, float] = {}  # rule -> since (wall), what the loop saw
        self.adopted = False  # the onsets published before a restart taken up again
        # the loop has said what holds here: until then (a command such as `guardian
        # holds` reads the latches too) nothing is published or judged
        self.told = False
        self.judged: float = -math.inf  # when this node last judged (monotonic)
        self.tripped: list[Trip] = []  # the trips this node latched first

    def firing(self, rules: Iterable[str]) -> None:
        """The loop, after each committed evaluation: the fleet rules whose condition
        holds on this node now (each keeps the time it was first seen)."""
        now = self.clock()
        with self._lock:
            self.onsets = {r: self.onsets.get(r, now) for r in rules}
            self.told = True

    def _read_api(self) -> dict[str, list[Hold]]:
        """One whole read (the worker's): the holds' reads and this node (one GET, the
        base's), then publish, read the latches, judge if due. The breaker's part
        (``breaker``) is the one last read where the latches cannot be read."""
        parts = super()._read_api()
        last = self.last["breaker"]
        ns = self.fleet.namespace
        what = f"breaker latches in {ns}"
        try:
            client = self.client
        except Exception as exc:  # lightkube's: no kubeconfig, no service account
            self._miss(what, no_credentials(exc))
            return {**parts, "breaker": last}
        self._publish(client, self.node)
        try:
            latches = [_latch(lease) for lease in client.list(
                Lease, namespace=ns, labels={LABEL: "tripped"})]
        except API_ERRORS as exc:
            self._miss(what, _why(exc))
            return {**parts, "breaker": last}
        for x in latches:
            if x.problem is not None:
                self._say(f"breaker latch {ns}/{x.name}: its record ({RECORD}) cannot be "
                          f"read ({x.problem}); it holds {x.holds_what} in "
                          f"{x.group}, failing closed, until a human removes it")
        fresh = self._judge(client, latches)
        return {**parts, "breaker": [x.hold(ns) for x in [*latches, *fresh]
                                     if in_group(x.group, self.labels)]}

    def _publish(self, client: Client, node: Node | None) -> None:
        """Write this node's firing rules where they changed from what ``node`` (this
        node as this read got it, its labels taken; None: it could not be read) says."""
        if node is None:
            self._say(f"node {self.me}: not read; its labels as last read stand (never "
                      "read: every breaker latch holds it) and its firing rules are not "
                      "published")
            return
        meta = node.metadata
        published = parse_firing(((meta and meta.annotations) or {}).get(FIRING))
        with self._lock:
            if not self.told:
                return
            if not self.adopted:  # a restart: the onsets it published still stand
                self.onsets.update({r: s for r, s in published.items() if r in self.onsets})
                self.adopted = True
            onsets = dict(self.onsets)
        has = FIRING in ((meta and meta.annotations) or {})
        if published == onsets and (has or not onsets):
            return  # written only on change (nothing firing and nothing published: none)
        text = json.dumps(dict(sorted(onsets.items())), separators=(",", ":"))
        try:
            client.patch(Node, self.me, {"metadata": {"annotations": {FIRING: text}}})
        except API_ERRORS as exc:
            self._say(f"node {self.me}: cannot publish {FIRING}: {_why(exc)}")

    def _judge(self, client: Client, latches: list[Latch]) -> list[Latch]:
        """Judge the fleet when a rule began holding here within the window and no latch
        of it holds this node yet (at most every ``every``); latch what trips. The
        latches this node created."""
        now, mono = self.clock(), self.monotonic()
        with self._lock:
            onsets = dict(self.onsets)
        have = {(x.rule, x.group) for x in latches}
        held = {x.rule for x in latches if in_group(x.group, self.labels)}
        recent = [r for r, s in onsets.items()
                  if now - s <= self.bp.window and r not in held]
        if not recent or mono - self.judged < self.bp.every:
            return []
        self.judged = mono
        try:
            nodes = [NodeFiring(_name(n), dict((n.metadata and n.metadata.labels) or {}),
                                parse_firing(((n.metadata and n.metadata.annotations) or {})
                                             .get(FIRING)))
                     for n in client.list(Node)]
        except API_ERRORS as exc:
            self._say(f"breaker: cannot list the nodes: {_why(exc)}")
            return []
        out = []
        for trip in judge(nodes, now, self.bp):
            if (trip.rule, trip.group) not in have:
                latch = self._trip(client, trip, now)
                if latch is not None:
                    out.append(latch)
        return out

    def _trip(self, client: Client, trip: Trip, now: float) -> Latch | None:
        """Create the latch if absent; the node whose create succeeds raises the Event."""
        ns = self.fleet.namespace
        name = latch_name(self.fleet.name, trip.rule, trip.group)
        record = {"rule": trip.rule, "group": trip.group, "why": trip.why, "at": now,
                  "holding": trip.holding, "nodes": trip.nodes, "share": round(trip.share, 4),
                  "bound": trip.bound, "window": trip.window, "names": list(trip.names[:50])}
        when = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        lease = Lease(metadata=ObjectMeta(name=name, namespace=ns, labels={LABEL: "tripped"},
                                          annotations={RECORD: json.dumps(record)}),
                      spec=LeaseSpec(holderIdentity=self.me, acquireTime=when))
        try:
            client.create(lease, namespace=ns)
        except ApiError as exc:
            if exc.status.code == 409:
                return None  # another node tripped it first: one signal, not N
            self._say(f"breaker: cannot latch {trip.rule} in {trip.where}: {_why(exc)}")
            return None
        except API_ERRORS as exc:
            self._say(f"breaker: cannot latch {trip.rule} in {trip.where}: {_why(exc)}")
            return None
        self.tripped.append(trip)
        log.error("breaker tripped: %s; %s's disruptive actions are held on those nodes "
                  "until a human releases it (guardian breaker release %s --why TEXT)",
                  trip.why, trip.rule, trip.rule)
        event(client, ns, name, self.me, "GuardianBreakerTripped", f"{trip.why}; held "
              f"until released: guardian breaker release {trip.rule} --why TEXT")
        return Latch(name, record, self.me)


def _name(n: Node) -> str:
    return (n.metadata and n.metadata.name) or ""


def _latch(lease: Lease) -> Latch:
    """What ``lease`` latches; one whose record cannot be read still holds (see
    :class:`Latch`), and `guardian breaker` shows it."""
    meta = lease.metadata
    text = ((meta and meta.annotations) or {}).get(RECORD)
    try:
        record: object = json.loads(text) if text is not None else None
    except ValueError:
        record = None
    return Latch((meta and meta.name) or "", record,
                 (lease.spec and lease.spec.holderIdentity) or "?")


def event(client: Client, ns: str, lease: str, host: str, reason: str, message: str) -> None:
    """A Warning Event on the latch's Lease (the breaker's fleet-level signal)."""
    now = dt.datetime.now(dt.timezone.utc)
    try:
        client.create(Event(
            metadata=ObjectMeta(name=f"{lease}.{time.time_ns():x}", namespace=ns),
            involvedObject=ObjectReference(kind="Lease", name=lease, namespace=ns,
                                           apiVersion="coordination.k8s.io/v1"),
            reason=reason, message=message[:1000], type="Warning", count=1,
            firstTimestamp=now, lastTimestamp=now,
            source=EventSource(component="guardian", host=host)), namespace=ns)
    except API_ERRORS as exc:
        log.error("breaker: cannot create the %s event: %s", reason, _why(exc))


def latches(client: Client, namespace: str) -> list[tuple[Lease, Latch]]:
    """Every latch in ``namespace``, as its Lease and what it says."""
    return [(lease, _latch(lease)) for lease in client.list(
        Lease, namespace=namespace, labels={LABEL: "tripped"})]


def release(params: FleetParams, rule: str, why: str, author: str,
            group: str | None = None, client: Client | None = None) -> list[Latch]:
    """A human's release: delete the latches of ``rule`` (in ``group``, or all of its
    groups) and record who and why in a ``GuardianBreakerReleased`` Event on each. The
    latches released (none: nothing was tripped). ``client``: made from ``params`` when
    not given (lightkube's ConfigError without credentials); the API's errors are
    raised."""
    client = client or make_client(params)
    out = []
    for _, latch in latches(client, params.namespace):
        if latch.rule != rule or (group is not None and latch.group != group):
            continue
        client.delete(Lease, name=latch.name, namespace=params.namespace)
        event(client, params.namespace, latch.name, author, "GuardianBreakerReleased",
              f"{author} released the breaker on {rule} in {latch.group}: {why} (it had "
              f"tripped {_stamp(latch.at)}: {latch.why})")
        out.append(latch)
    return out

