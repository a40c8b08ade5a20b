"""The pods on this node whose processes hold one GPU, found by their UIDs (a process's
cgroup names its pod's UID: :func:`guardian.hostio.procfs.pod_uid_of`) and evicted as
``kube.drain`` evicts (its code: the Eviction subresource, a PodDisruptionBudget's 429
retried until ``wait``, kubectl's filters), for ``gpu.reset``'s ``evict_pods``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta
from pydantic import Field

from guardian.kube.actions import API_ERRORS, _why
from guardian.kube.client import node_name
from guardian.kube.drain import EVENTS_KEPT, DrainParams, KubeDrain, sort_pods


class PodsParams(DrainParams):
    """kube.drain's parameters (no cordon: the node keeps its other pods), and the
    namespaces whose pods are never evicted (kube.evict's)."""

    # with the reset's own `timeout` (120 s) the apply stays under [service]
    # apply_timeout (300 s by default); `guardian check` adds them up
    wait: float = Field(150.0, gt=0, le=3600, description="seconds to wait for the pods "
                        "to be gone and the GPU free of processes (429s retried "
                        "meanwhile); with the reset's timeout (and force_wait) below "
                        "[service] apply_timeout")
    protected_namespaces: list[str] = Field(["kube-system"], description="pods there are "
                                            "never evicted unless allow_protected")
    allow_protected: bool = False


@dataclass
class Found:
    """The pods to evict (``(namespace, name)`` -> UID) and what refuses the eviction."""

    node: str
    evict: dict[tuple[str, str], str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


class GpuPods:
    """Finds and evicts the pods that hold a GPU (see the module docstring)."""

    def __init__(self, params: PodsParams) -> None:
        self.params = params
        self.drain = KubeDrain(params)

    def find(self, holders: dict[str, list[str]]) -> Found:
        """The pods on this node (``spec.nodeName``) whose ``metadata.uid`` is one of
        ``holders`` (pod UID -> the processes on the GPU, in words). A UID no pod on the
        node has, a DaemonSet's or a static pod's mirror (never evicted: it would be back
        at once), a protected namespace, or kubectl's own refusals (emptyDir data, no
        controller) refuse the whole eviction: the GPU would stay held."""
        p = self.params
        found = Found(node_name(p))
        try:
            pods = self.drain._pods(found.node)
        except API_ERRORS as exc:
            found.refused.append(f"cannot list pods on {found.node}: {_why(exc)}")
            return found
        by_uid = {pod.metadata.uid: pod for pod in pods if pod.metadata and pod.metadata.uid}
        mine = []
        for uid, who in sorted(holders.items()):
            if uid not in by_uid:
                found.refused.append(f"pod UID {uid} ({', '.join(who)}) is no pod on node "
                                     f"{found.node} the API server knows")
            else:
                mine.append(by_uid[uid])
        evict, skipped, refused = sort_pods(mine, p)
        found.refused += [f"{why} and holds the GPU: never evicted" for why in skipped]
        found.refused += refused
        for pod in evict:
            meta = pod.metadata or ObjectMeta()
            ns, name = meta.namespace or "", meta.name or ""
            if ns in p.protected_namespaces and not p.allow_protected:
                found.refused.append(f"pod {ns}/{name} holds the GPU and namespace {ns} is "
                                     f"protected (say allow_protected = true)")
                continue
            found.evict[(ns, name)] = meta.uid or ""
        return found

    def evict(self, pods: dict[tuple[str, str], str], deadline: float
              ) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
        """Evict ``pods`` and wait until ``deadline`` for them to be gone (a pod of the
        name with another UID is a replacement: gone). Returns what the audit keeps (pods
        gone, left with why, forced, each pod's progress with its time) and the pods
        left."""
        t0 = time.monotonic()
        events: list[list[Any]] = []

        def said(pod: tuple[str, str], what: str) -> None:
            if len(events) < EVENTS_KEPT:
                events.append([round(time.monotonic() - t0, 3), f"{pod[0]}/{pod[1]}", what])

        uid: dict[tuple[str, str], str | None] = dict(pods)
        left, forced = self.drain.evict_pods(uid, deadline, said)
        return {"gone": sorted(f"{k[0]}/{k[1]}" for k in pods if k not in left),
                "left": {f"{k[0]}/{k[1]}": why for k, why in sorted(left.items())},
                "forced": forced, "progress": events}, left


def pods_seconds(p: PodsParams) -> float:
    """The longest the eviction may wait: ``wait``, plus ``force_wait`` with ``force``."""
    return p.wait + (p.force_wait if p.force else 0.0)

