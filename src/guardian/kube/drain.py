"""kube.drain: cordon the node (claimed for the rule), evict its pods through the Eviction
API and wait until they are gone, as ``kubectl drain`` does (kubectl pkg/drain/drain.go
and filters.go, quoted below); with ``on = "both"`` the rule's cordon is undone when it
resolves."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from lightkube import ApiError
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from pydantic import Field

from guardian.kube import owned
from guardian.kube.actions import API_ERRORS, Cordon, NodePayload, OwnedNodeAction, _why
from guardian.kube.client import KubeParams, node_name
from guardian.plugin.contract import ActionContext, Outcome, Plan, Step

MIRROR = "kubernetes.io/config.mirror"  # corev1.MirrorPodAnnotationKey
EVENTS_KEPT = 200  # progress entries kept in the outcome


class DrainParams(KubeParams):
    grace_period: int | None = Field(None, ge=0, le=3600, description="seconds each pod "
                                     "gets to stop (default: its own "
                                     "terminationGracePeriodSeconds)")
    # wait + force_wait stay under [service] apply_timeout (300 s by default), after which
    # the executor reports the apply as overrunning (its outcome is audited when it ends)
    wait: float = Field(240.0, gt=0, le=3600, description="seconds to wait for every pod "
                        "to be gone (kubectl drain --timeout), 429s retried meanwhile; "
                        "with force_wait, keep it under [service] apply_timeout")
    retry_delay: float = Field(5.0, ge=0, le=300, description="wait after a "
                               "PodDisruptionBudget's 429 (kubectl's EvictErrorRetryDelay)")
    interval: float = Field(1.0, gt=0, le=60, description="how often a pod's going is "
                            "checked (kubectl: 1 s)")
    delete_emptydir_data: bool = Field(False, description="drain pods with emptyDir "
                                       "volumes (their data is lost); else refuse")
    evict_unmanaged: bool = Field(False, description="evict pods no controller recreates "
                                  "(kubectl drain --force); else refuse")
    force: bool = Field(False, description="after `wait`, delete the pods still there "
                        "(PodDisruptionBudgets bypassed) and wait `force_wait` more")
    force_wait: float = Field(45.0, gt=0, le=3600)


def _finished(pod: Pod) -> bool:
    return bool(pod.status and pod.status.phase in ("Succeeded", "Failed"))


def _controller(pod: Pod) -> Any:
    for ref in (pod.metadata and pod.metadata.ownerReferences) or []:
        if ref.controller:
            return ref
    return None


def sort_pods(pods: list[Pod], p: DrainParams) -> tuple[list[Pod], list[str], list[str]]:
    """kubectl's filters in its order (filters.go makeFilters): the pods to evict, the
    ones skipped (with why), and what refuses the drain."""
    evict, skipped, refused = [], [], []
    for pod in pods:
        meta = pod.metadata or ObjectMeta()
        who = f"pod {meta.namespace}/{meta.name}"
        ref = _controller(pod)
        # daemonSetFilter: "we return false in cases where the pod is DaemonSet managed,
        # regardless of flags" (the DaemonSet controller would put it straight back);
        # "Any finished pod can be removed."
        if ref is not None and ref.kind == "DaemonSet" and ref.apiVersion == "apps/v1" \
                and not _finished(pod):
            skipped.append(f"{who}: DaemonSet-managed")
            continue
        # mirrorPodFilter: a static pod's mirror; the kubelet owns it, not the API
        if MIRROR in (meta.annotations or {}):
            skipped.append(f"{who}: mirror of a static pod")
            continue
        # localStorageFilter: "Pods with local storage (use --delete-emptydir-data to
        # override)"
        if any(v.emptyDir is not None for v in (pod.spec and pod.spec.volumes) or []) \
                and not _finished(pod) and not p.delete_emptydir_data:
            refused.append(f"{who} has emptyDir data (say delete_emptydir_data = true)")
            continue
        # unreplicatedFilter: "Pods that declare no controller (use --force to override)"
        if ref is None and not _finished(pod) and not p.evict_unmanaged:
            refused.append(f"{who} declares no controller: nothing would recreate it "
                           f"(say evict_unmanaged = true)")
            continue
        evict.append(pod)
    return evict, skipped, refused


def _key(pod: Pod) -> tuple[str, str]:
    meta = pod.metadata or ObjectMeta()
    return meta.namespace or "", meta.name or ""


class KubeDrain(OwnedNodeAction[DrainParams]):
    """Cordon this node and evict its pods (policy/v1 Eviction: PodDisruptionBudgets
    hold, a 429 is retried until ``wait``), waiting until they are gone; DaemonSet and
    mirror (static) pods skipped; emptyDir and unmanaged pods refuse the drain unless
    allowed; ``force`` deletes what is left after ``wait``. With ``on = "both"`` the
    rule's cordon is undone when it resolves (never someone else's)."""

    name: ClassVar[str] = "kube.drain"
    Params = DrainParams
    sets = True

    def things(self, ctx: ActionContext) -> list[owned.Thing]:
        return [Cordon()]

    def _pods(self, node: str) -> list[Pod]:
        return list(self.client().list(Pod, namespace="*", fields={"spec.nodeName": node}))

    def plan(self, ctx: ActionContext) -> Plan[NodePayload]:
        if ctx.kind == "resolved":
            return super().plan(ctx)
        p = self.params
        node = node_name(p)
        plan = super().plan(ctx)  # the cordon
        if plan.refused:
            return plan
        try:
            evict, skipped, refused = sort_pods(self._pods(node), p)
        except API_ERRORS as exc:
            plan.refused.append(f"cannot list pods on {node}: {_why(exc)}")
            return plan
        plan.skipped += skipped
        plan.refused += refused
        grace = f"{p.grace_period} s" if p.grace_period is not None else "its own"
        for pod in evict:
            ns, name = _key(pod)
            plan.steps.append(Step(f"pod {ns}/{name}", f"evict (policy/v1 Eviction, grace "
                                                       f"{grace}); wait until gone"))
        force = f"; then delete what is left and wait {p.force_wait:g}s more" if p.force \
            else "; then report what is left"
        plan.note = "; ".join(x for x in (plan.note, f"{len(evict)} pod(s) within "
                                          f"{p.wait:g}s{force}") if x)
        return plan

    def apply(self, plan: Plan[NodePayload], ctx: ActionContext) -> Outcome:
        cordon = super().apply(plan, ctx)
        if ctx.kind == "resolved" or not cordon.ok:
            return cordon
        p = self.params
        node = plan.data["node"]
        t0 = time.monotonic()
        events: list[list[Any]] = []

        def said(pod: tuple[str, str], what: str) -> None:
            if len(events) < EVENTS_KEPT:
                events.append([round(time.monotonic() - t0, 3), f"{pod[0]}/{pod[1]}", what])

        try:  # afresh: what the plan saw may have changed
            evict, skipped, refused = sort_pods(self._pods(node), p)
        except API_ERRORS as exc:
            return Outcome(ok=False, error=f"cannot list pods on {node}: {_why(exc)}",
                           data={"cordon": cordon.detail})
        if refused:
            return Outcome(ok=False, error="; ".join(refused), data={"cordon": cordon.detail})
        uid = {_key(pod): (pod.metadata.uid if pod.metadata else None) for pod in evict}
        waiting, forced = self.evict_pods(uid, t0 + p.wait, said)
        data: dict[str, Any] = {
            "cordon": cordon.detail, "skipped": skipped,
            "gone": sorted(f"{k[0]}/{k[1]}" for k in uid if k not in waiting),
            "left": {f"{k[0]}/{k[1]}": why for k, why in sorted(waiting.items())},
            "forced": forced, "progress": events}
        if waiting:
            return Outcome(ok=False, verified=False, data=data,
                           error=f"{len(waiting)} pod(s) still on {node} after "
                                 f"{time.monotonic() - t0:.0f}s: " + "; ".join(
                                     f"{k[0]}/{k[1]}: {w}" for k, w in sorted(waiting.items())))
        try:
            left, _, _ = sort_pods(self._pods(node), p)
            read = self.client().get(Node, name=node)
            cordoned = bool(read.spec and read.spec.unschedulable)
        except API_ERRORS as exc:
            return Outcome(ok=True, verified=None, data=data,
                           detail=f"drained; cannot read back: {_why(exc)}")
        return Outcome(ok=True, verified=cordoned and not left, data=data,
                       detail=f"node {node} drained: {len(uid)} pod(s) gone")

    def evict_pods(self, uid: dict[tuple[str, str], str | None], deadline: float, said: Any
                   ) -> tuple[dict[tuple[str, str], str], list[str]]:
        """Evict the pods (``(namespace, name)`` -> UID) and wait until ``deadline`` for
        them to be gone; with ``force``, delete those still there and wait ``force_wait``
        more. Returns the pods left (with why) and those deleted by force. ``said(pod,
        what)`` hears each pod's progress."""
        p = self.params
        waiting = self._evict_and_wait(uid, deadline, said)
        forced: list[str] = []
        if waiting and p.force:
            for key in sorted(waiting):
                try:
                    self.client().delete(Pod, key[1], namespace=key[0],
                                         grace_period=p.grace_period)
                    said(key, "deleted (force)")
                    forced.append(f"{key[0]}/{key[1]}")
                except ApiError as exc:
                    if exc.status.code != 404:
                        said(key, f"delete failed: {_why(exc)}")
                except API_ERRORS as exc:
                    said(key, f"delete failed: {_why(exc)}")
            waiting = self._wait_gone(waiting, time.monotonic() + p.force_wait, said, uid)
        return waiting, forced

    def _evict_and_wait(self, uid: dict[tuple[str, str], str | None], deadline: float,
                        said: Any) -> dict[tuple[str, str], str]:
        """kubectl's evictPods: evict each pod until accepted (404: gone already; 429:
        retried after retry_delay; anything else gives that pod up), then wait for it to
        be gone. Returns the pods still there at ``deadline``, with why."""
        p = self.params
        left: dict[tuple[str, str], str] = {k: "not yet evicted" for k in uid}
        next_try = dict.fromkeys(uid, 0.0)
        accepted: set[tuple[str, str]] = set()
        body = DeleteOptions(gracePeriodSeconds=p.grace_period) \
            if p.grace_period is not None else None
        while True:
            now = time.monotonic()
            for key in sorted(k for k in left if k not in accepted and next_try[k] <= now
                              and not left[k].startswith("eviction failed")):
                ns, name = key
                try:
                    self.client().create(Pod.Eviction(
                        metadata=ObjectMeta(name=name, namespace=ns), deleteOptions=body),
                        name=name, namespace=ns)
                    accepted.add(key)
                    left[key] = "evicted, still terminating"
                    said(key, "eviction accepted")
                except ApiError as exc:
                    if exc.status.code == 404:
                        accepted.add(key)
                    elif exc.status.code == 429:
                        left[key] = f"a PodDisruptionBudget refuses its eviction (429): " \
                                    f"{exc.status.message}"
                        next_try[key] = now + p.retry_delay
                        said(key, "429: disruption budget")
                    else:
                        left[key] = f"eviction failed: {_why(exc)}"
                        said(key, left[key])
                except API_ERRORS as exc:  # unreachable: tried again at the next round
                    left[key] = f"eviction not sent: {_why(exc)}"
                    next_try[key] = now + p.retry_delay
            still = self._wait_gone({k: left[k] for k in accepted if k in left}, 0.0, said,
                                    uid)
            for key in [k for k in accepted if k in left and k not in still]:
                del left[key]
            if not left or time.monotonic() >= deadline or all(
                    w.startswith("eviction failed") for w in left.values()):
                return left
            time.sleep(min(p.interval, max(0.0, deadline - time.monotonic())))

    def _wait_gone(self, pods: dict[tuple[str, str], str], deadline: float, said: Any,
                   uid: dict[tuple[str, str], str | None] | None = None
                   ) -> dict[tuple[str, str], str]:
        """waitForDelete: a pod is gone when the API says 404 or a pod of that name has
        another UID (a StatefulSet's replacement). Polls until ``deadline`` (0: once);
        returns those still there."""
        left = dict(pods)
        while left:
            for key in sorted(left):
                try:
                    got = self.client().get(Pod, name=key[1], namespace=key[0])
                except ApiError as exc:
                    if exc.status.code == 404:
                        del left[key]
                        said(key, "gone")
                    continue
                except API_ERRORS:
                    continue
                if uid is not None and got.metadata and got.metadata.uid != uid.get(key):
                    del left[key]
                    said(key, "gone (replaced by a new pod of the name)")
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(min(self.params.interval, max(0.0, deadline - time.monotonic())))
        return left


def drain_seconds(p: DrainParams) -> float:
    """The longest a drain may wait: ``wait``, plus ``force_wait`` with ``force``."""
    return p.wait + (p.force_wait if p.force else 0.0)


def check(rules: list[Any], apply_timeout: float) -> list[tuple[Any, str]]:
    """``guardian check``'s errors: a drain (kube.drain, or node.reboot's ``drain``; an
    action, an escalation or a ladder's step) whose waits reach the service's
    ``apply_timeout``: the executor would give up on it while it goes on evicting and,
    with ``force``, later deletes pods unseen."""
    out = []
    for rule in rules:
        for a in rule.bound_actions():
            if a.use == "kube.drain":
                p = a.action.params
            elif a.use == "node.reboot" and a.action.params.drain is not None:
                p = DrainParams.model_validate(a.action.params.drain)
            else:
                continue
            took = drain_seconds(p)
            if took >= apply_timeout:
                waits = f"wait {p.wait:g}s" + (f" + force_wait {p.force_wait:g}s"
                                               if p.force else "")
                out.append((rule, f"rule {rule.spec.name!r}: {a.use}: {waits} = {took:g}s "
                                  f"is not below [service] apply_timeout "
                                  f"({apply_timeout:g}s): the apply would be given up "
                                  f"while the drain goes on; shorten the waits or raise "
                                  f"apply_timeout"))
    return out
