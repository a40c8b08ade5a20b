"""Node-scoped Kubernetes actions: cordon, uncordon, evict (through the Eviction API, so
PodDisruptionBudgets hold), a node condition, and an Event."""

from __future__ import annotations

import datetime as dt
import os
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node, Pod
from pydantic import Field
from typing_extensions import TypedDict, TypeVar

from guardian.hostio.host import exists
from guardian.kube import owned
from guardian.kube.client import KubeParams, make_client, node_name
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Egress,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)

# ValueError: a reply that does not decode as the resource (msgspec raises ValueError)
API_ERRORS = (ApiError, httpx2.HTTPError, OSError, ValueError)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339(t: dt.datetime | str) -> str:
    if isinstance(t, str):
        return t
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unschedulable(node: Node) -> bool:
    return bool(node.spec and node.spec.unschedulable)


def _why(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"API {exc.status.code}: {exc.status.message}"
    return f"API unreachable: {exc.__class__.__name__}: {exc}"


def api_server(params: KubeParams) -> Egress:
    """The API server a client of ``params`` talks to, found as :func:`make_client` finds
    it (the kubeconfig, the in-cluster service account, $KUBECONFIG): what a kube.*
    action, ``[fleet]`` and ``[holds.kube]`` need to reach."""
    what = "the Kubernetes API server"
    try:
        if params.kubeconfig:
            server = KubeConfig.from_file(params.kubeconfig).get()
        elif exists(Path(params.service_account) / "token"):
            return Egress(os.environ.get("KUBERNETES_SERVICE_HOST"), f"{what} (in-cluster)")
        else:
            server = KubeConfig.from_env().get()
        url = server.cluster.server if server else ""
    except Exception:  # a kubeconfig that does not load: the host is not known
        url = ""
    host = urlsplit(url).hostname if url else None
    return Egress(host, f"{what} {url}" if url else f"{what} (its address is not known "
                  "here: no kubeconfig that loads)")


K = TypeVar("K", bound=KubeParams)
KD = TypeVar("KD", default=dict[str, Any])


class NodePayload(TypedDict):
    node: str


class EvictPayload(TypedDict):
    pods: list[list[str]]  # [namespace, name], lowest priority first


class ConditionPayload(TypedDict):
    node: str
    condition: dict[str, str]  # type, status, reason, message


class EventPayload(TypedDict):
    node: str
    message: str


class KubeAction(Action[K, KD]):
    """Shared: the client (one per action, reused) and the node's name."""

    _client: Client | None = None

    @property
    def kube(self) -> KubeParams:
        return self.params

    def sandbox_needs(self) -> SandboxNeeds:
        return SandboxNeeds(egress=(api_server(self.kube),))

    def client(self) -> Client:
        if self._client is None:
            self._client = make_client(self.kube)
        return self._client


class CordonParams(KubeParams):
    pass


class OwnedNodeAction(KubeAction[K, NodePayload]):
    """Sets or releases things guardian owns on the node (see :mod:`.owned`): a set
    action claims them for its rule, and releases that claim when the rule resolves
    (``on = "both"``); a release action drops its rule's claim and removes a thing once
    no rule claims it. Never removes what guardian did not set. ``guardian act`` of a
    release drops every guardian rule's claim (the operator's call)."""

    sets: ClassVar[bool]

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        raise NotImplementedError

    def _who(self, ctx: ActionContext) -> tuple[str | None, bool]:
        want = self.sets and ctx.kind != "resolved"
        return (None if ctx.kind == "manual" and not want else ctx.rule), want

    def plan(self, ctx: ActionContext) -> Plan[NodePayload]:
        node = node_name(self.kube)
        plan: Plan[NodePayload] = Plan(self.name, ctx.rule, data={"node": node})
        try:
            things = self.things(ctx)
            rule, want = self._who(ctx)
            _, said = owned.changes(self.client().get(Node, name=node), things, rule, want)
        except owned.Refused as exc:
            plan.refused.append(f"node {node}: {exc}")
            return plan
        except API_ERRORS as exc:
            plan.refused.append(f"node {node}: {_why(exc)}")
            return plan
        plan.steps = [Step(f"node {node}", what) for what, changes in said if changes]
        notes = [what for what, changes in said if not changes]
        if notes:
            plan.note = f"node {node}: " + "; ".join(notes)
        return plan

    def apply(self, plan: Plan[NodePayload], ctx: ActionContext) -> Outcome:
        node = plan.data["node"]
        try:
            things = self.things(ctx)
            rule, want = self._who(ctx)
        except owned.Refused as exc:
            return Outcome(ok=False, error=f"node {node}: {exc}")
        said: list[list[tuple[str, bool]]] = []

        def patch(n: Node) -> dict[str, Any] | None:
            p, words = owned.changes(n, things, rule, want)
            said.append(words)
            return p

        try:
            _, after = owned.patch_node(self.client(), node, patch)
            again, _ = owned.changes(after, things, rule, want)
        except owned.Refused as exc:
            return Outcome(ok=False, error=f"node {node}: {exc}")
        except API_ERRORS as exc:
            return Outcome(ok=False, error=_why(exc))
        have = owned.claims(after)
        return Outcome(ok=True, verified=again is None,
                       detail=f"node {node}: " + "; ".join(w for w, _ in said[-1]),
                       data={"changed": any(c for _, c in said[-1]),
                             "claims": {t.key: have.get(t.key, {}) for t in things}})


class Cordon(owned.Thing):
    key = what = "cordon"

    def present(self, node: Node) -> bool:
        return _unschedulable(node)

    def add(self, node: Node) -> dict[str, Any]:
        return {"spec": {"unschedulable": True}}

    def remove(self, node: Node) -> dict[str, Any]:
        return {"spec": {"unschedulable": False}}


class KubeCordon(OwnedNodeAction[CordonParams]):
    """Mark this node unschedulable, claimed for the rule; with ``on = "both"`` the rule's
    cordon is undone when it resolves. A node already cordoned by someone else is left
    as it is and never uncordoned by guardian."""

    name: ClassVar[str] = "kube.cordon"
    Params = CordonParams
    sets = True

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        return [Cordon()]


class KubeUncordon(OwnedNodeAction[CordonParams]):
    """Drop the rule's claim on guardian's cordon; uncordon once no rule claims it. A
    cordon guardian did not make is never undone."""

    name: ClassVar[str] = "kube.uncordon"
    disruptive: ClassVar[bool] = False
    Params = CordonParams
    sets = False

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        return [Cordon()]


class EvictParams(KubeParams):
    namespaces: list[str] = Field(["*"], description="namespace globs")
    selector: dict[str, str] = Field(default_factory=dict, description="pod labels")
    priority_classes: list[str] | None = None
    qos: list[Literal["BestEffort", "Burstable", "Guaranteed"]] | None = None
    protected_namespaces: list[str] = Field(["kube-system"],
                                            description="never evicted unless allowed")
    allow_protected: bool = False
    max_pods: int = Field(5, ge=1, description="pods evicted in one run, lowest priority "
                          "first")
    attempts: int = Field(3, ge=1, le=20, description="tries per pod while a PDB says 429")
    backoff: float = Field(2.0, ge=0, le=300, description="first wait after a 429 (doubles)")


class KubeEvict(KubeAction[EvictParams, EvictPayload]):
    """Evict pods from this node through the Eviction subresource (policy/v1)."""

    name: ClassVar[str] = "kube.evict"
    Params = EvictParams

    def plan(self, ctx: ActionContext) -> Plan[EvictPayload]:
        p = self.params
        node = node_name(p)
        plan: Plan[EvictPayload] = Plan(self.name, ctx.rule, data={"pods": []})
        try:
            pods = list(self.client().list(Pod, namespace="*",
                                           fields={"spec.nodeName": node}))
        except API_ERRORS as exc:
            plan.refused.append(f"cannot list pods on {node}: {_why(exc)}")
            return plan
        chosen = []
        for pod in pods:
            meta, spec = pod.metadata or ObjectMeta(), pod.spec
            if spec is None:
                continue
            ns, name = meta.namespace or "", meta.name or ""
            owners = [o.kind for o in meta.ownerReferences or []]
            if "DaemonSet" in owners:
                continue  # it would come straight back: never evicted
            if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
                continue  # a static pod's mirror: the API cannot evict it
            if not any(fnmatchcase(ns, g) for g in p.namespaces):
                continue
            labels = meta.labels or {}
            if any(labels.get(k) != v for k, v in p.selector.items()):
                continue
            if p.priority_classes is not None and (spec.priorityClassName or "") not in \
                    p.priority_classes:
                continue
            if p.qos is not None and (pod.status.qosClass if pod.status else None) not in p.qos:
                continue
            if ns in p.protected_namespaces and not p.allow_protected:
                plan.skipped.append(f"pod {ns}/{name}: namespace {ns} is protected")
                continue
            chosen.append((spec.priority or 0, ns, name))
        for _, ns, name in sorted(chosen)[:p.max_pods]:
            plan.data["pods"].append([ns, name])
            plan.steps.append(Step(f"pod {ns}/{name}", f"evict (policy/v1 Eviction) from {node}"))
        if not plan.steps and not plan.skipped:
            plan.note = f"no pod on {node} matches: nothing to do"
        return plan

    def apply(self, plan: Plan[EvictPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        results: dict[str, list[str]] = {"evicted": [], "gone": [], "blocked": [],
                                         "failed": []}
        errors = []
        for ns, name in plan.data.get("pods", []):
            outcome, why = self._evict(ns, name, p)
            results[outcome].append(f"{ns}/{name}")
            if why:
                errors.append(f"{ns}/{name}: {why}")
        data: dict[str, Any] = dict(results)
        if results["blocked"] or results["failed"]:
            return Outcome(ok=False, verified=False, data=data, error="; ".join(errors))
        return Outcome(ok=True, verified=True, data=data,
                       detail=f"{len(results['evicted'])} pod(s) evicted")

    def _evict(self, ns: str, name: str, p: EvictParams) -> tuple[str, str]:
        wait = p.backoff
        for attempt in range(p.attempts):
            try:
                self.client().create(Pod.Eviction(metadata=ObjectMeta(name=name, namespace=ns)),
                                     name=name, namespace=ns)
                return "evicted", ""
            except ApiError as exc:
                if exc.status.code == 404:
                    return "gone", ""
                if exc.status.code != 429:
                    return "failed", _why(exc)
                if attempt + 1 < p.attempts:
                    time.sleep(wait)
                    wait *= 2
            except API_ERRORS as exc:
                return "failed", _why(exc)
        return "blocked", f"a PodDisruptionBudget refused it {p.attempts} time(s) (429)"


_MESSAGE = ("$rule and $values (the evidence as text: ecs.service 711 restarts) are "
            "replaced; $values_json is the evidence as JSON")


class ConditionParams(KubeParams):
    type: str = Field("GuardianProblem", pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    reason: str = Field("GuardianRuleFiring", pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    message: str = Field("guardian rule $rule fired: $values", description=_MESSAGE)
    resolved_reason: str | None = Field(
        None, pattern=r"^[A-Za-z][A-Za-z0-9]*$", description="the reason once the rule "
        "resolves (default: reason + 'Resolved'); node-problem-detector's default condition "
        "reason, e.g. KernelHasNoDeadlock")
    resolved_message: str | None = Field(None, description="the message once the rule "
                                         "resolves (default: message)")


class KubeCondition(KubeAction[ConditionParams, ConditionPayload]):
    """Set a node condition, as node-problem-detector does: True while the rule fires;
    with ``on = "both"`` it is set back to False when the rule resolves."""

    name: ClassVar[str] = "kube.condition"
    disruptive: ClassVar[bool] = False
    Params = ConditionParams

    def plan(self, ctx: ActionContext) -> Plan[ConditionPayload]:
        p = self.params
        node = node_name(p)
        resolved = ctx.kind == "resolved"
        reason = (p.resolved_reason or f"{p.reason}Resolved") if resolved else p.reason
        if ctx.kind == "escalated":  # the remedy ran its limit: a person must look
            reason = f"{p.reason}NeedsHuman"
        message = p.resolved_message if resolved and p.resolved_message is not None \
            else p.message
        cond = {"type": p.type, "status": "False" if resolved else "True",
                "reason": reason,
                "message": ctx.message(message)[:1000]}
        return Plan(self.name, ctx.rule,
                    [Step(f"node {node}", f"condition {p.type}={cond['status']} "
                                          f"({cond['reason']})")],
                    data={"node": node, "condition": cond})

    def apply(self, plan: Plan[ConditionPayload], ctx: ActionContext) -> Outcome:
        node, cond = plan.data["node"], dict(plan.data["condition"])
        now = _now()
        cond["lastHeartbeatTime"] = cond["lastTransitionTime"] = now
        try:
            # lastTransitionTime changes only with the status: Node Health Check and EKS
            # node repair time their delays from it (k8s.io/api core/v1 NodeCondition)
            before = self.client().get(Node, name=node)
            for c in (before.status and before.status.conditions) or []:
                if c.type == cond["type"] and c.status == cond["status"] \
                        and c.lastTransitionTime is not None:
                    cond["lastTransitionTime"] = _rfc3339(c.lastTransitionTime)
            self.client().patch(Node.Status, node, {"status": {"conditions": [cond]}})
            got = self.client().get(Node, name=node)
        except API_ERRORS as exc:
            return Outcome(ok=False, error=_why(exc))
        have = {c.type: c.status for c in ((got.status and got.status.conditions) or [])}
        return Outcome(ok=True, verified=have.get(cond["type"]) == cond["status"],
                       detail=f"node {node}: {cond['type']}={cond['status']}")


class EventParams(KubeParams):
    reason: str = Field("GuardianRuleFired", pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    message: str = Field("guardian rule $rule fired: $values", description=_MESSAGE)
    type: Literal["Normal", "Warning"] = "Warning"
    namespace: str = "default"


class KubeEvent(KubeAction[EventParams, EventPayload]):
    """Emit an Event about this node."""

    name: ClassVar[str] = "kube.event"
    disruptive: ClassVar[bool] = False
    Params = EventParams

    def plan(self, ctx: ActionContext) -> Plan[EventPayload]:
        p = self.params
        node = node_name(p)
        text = ctx.message(p.message)
        return Plan(self.name, ctx.rule, [Step(f"node {node}", f"{p.type} event {p.reason}: "
                                                               f"{text[:200]}")],
                    data={"node": node, "message": text[:1000]})

    def apply(self, plan: Plan[EventPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        node = plan.data["node"]
        now = _now()
        event = Event(
            metadata=ObjectMeta(name=f"{node}.guardian.{time.time_ns():x}",
                                namespace=p.namespace),
            involvedObject=ObjectReference(kind="Node", name=node, apiVersion="v1"),
            reason=p.reason, message=plan.data["message"], type=p.type, count=1,
            firstTimestamp=now, lastTimestamp=now,  # type: ignore[arg-type]
            source=EventSource(component="guardian", host=node))
        try:
            self.client().create(event, namespace=p.namespace)
        except API_ERRORS as exc:
            return Outcome(ok=False, error=_why(exc))
        return Outcome(ok=True, verified=True, detail=f"event {p.reason} on node {node}")
