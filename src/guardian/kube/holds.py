"""Fleet-wide holds for the DaemonSet: ``[[hold]]`` tables in a ConfigMap key (every
node), and a node annotation holding JSON (this node), read at every tick.

```
# the shipped DaemonSet reads namespace "guardian" ([holds.kube] namespace; unset: kube-system)
kubectl -n guardian create configmap guardian-holds --from-file=holds.toml
kubectl annotate node n1 guardian.io/hold='{"until": "2026-12-05T06:00:00Z",
  "reason": "kernel rollout", "author": "alice"}'
```
When the API cannot be read, the holds last read stay in force (until they expire): a
pause must not lift because the API server is busy. A key or annotation that cannot be
parsed, in whole or in one entry, holds every rule until it is fixed (the holds last
read stay in force beside it). The cost: one GET of the ConfigMap and
one of this node a tick (at 15 s ticks, a thousand nodes make ~130 requests a second;
``annotation = ""`` halves it).
"""

from __future__ import annotations

import logging

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap, Node
from pydantic import Field

from guardian.kube.actions import API_ERRORS, _why
from guardian.kube.client import KubeParams, make_client, node_name
from guardian.model.holds import Hold, parse_holds

log = logging.getLogger("guardian.holds")


class KubeHoldsParams(KubeParams):
    timeout: float = Field(3.0, gt=0, le=30, description="seconds per API request (read "
                           "on the loop, at every tick)")
    namespace: str = "kube-system"
    configmap: str = Field("guardian-holds", description="a ConfigMap of holds for every "
                           "node (\"\" for none)")
    key: str = Field("holds.toml", description="its key: [[hold]] tables")
    annotation: str = Field("guardian.io/hold", description="a node annotation: one hold "
                            "(JSON) or a list of them, for this node only (\"\" for none)")


class KubeHolds:
    """Reads the ConfigMap and this node's annotation; :meth:`read` at every tick."""

    def __init__(self, params: KubeHoldsParams) -> None:
        self.p = params
        self.me = node_name(params)
        self._client: Client | None = None
        self.last: dict[str, list[Hold]] = {"configmap": [], "annotation": []}
        self.said: set[str] = set()  # problems already logged

    @property
    def client(self) -> Client:
        if self._client is None:  # made when first needed: no credentials is an error
            self._client = make_client(self.p)  # a tick reports, not a start-up crash
        return self._client

    def read(self) -> list[Hold]:
        """The holds the API holds now (the last good ones where it cannot be read)."""
        p = self.p
        try:
            client = self.client
        except Exception as exc:  # lightkube's: no kubeconfig, no service account
            self._say(f"no Kubernetes client: {exc}; keeping the holds last read")
            return [*self.last["configmap"], *self.last["annotation"]]
        if p.configmap:
            where = f"configmap {p.namespace}/{p.configmap}"
            try:
                cm = client.get(ConfigMap, name=p.configmap, namespace=p.namespace)
                text = (cm.data or {}).get(p.key, "")
                self.last["configmap"] = self._parse(text, f"{where}:{p.key}", "toml",
                                                     self.last["configmap"])
            except ApiError as exc:
                if exc.status.code == 404:
                    self.last["configmap"] = []
                else:
                    self._say(f"{where}: {_why(exc)}; keeping the holds last read")
            except API_ERRORS as exc:
                self._say(f"{where}: {_why(exc)}; keeping the holds last read")
        if p.annotation:
            try:
                node = client.get(Node, name=self.me)
                text = ((node.metadata and node.metadata.annotations) or {}).get(
                    p.annotation, "")
                self.last["annotation"] = self._parse(
                    text, f"node {self.me} annotation {p.annotation}", "json",
                    self.last["annotation"])
            except API_ERRORS as exc:
                self._say(f"node {self.me}: {_why(exc)}; keeping the holds last read")
        return [*self.last["configmap"], *self.last["annotation"]]

    def _parse(self, text: str, source: str, fmt: str, last: list[Hold]) -> list[Hold]:
        """The holds in ``text``, with the last good ones kept and a hold on every rule
        added where any of it cannot be parsed (a typo must not lift a pause)."""
        if not text.strip():
            return []
        holds, problems = parse_holds(text, source, fmt)
        for problem in problems:
            self._say(problem)
        if not problems:
            return holds
        return [*holds, *(h for h in last if not h.broken and h not in holds)]

    def _say(self, problem: str) -> None:
        if problem not in self.said:
            self.said.add(problem)
            log.error("holds: %s", problem)
