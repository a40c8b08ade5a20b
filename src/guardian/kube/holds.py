"""Fleet-wide holds for the DaemonSet: ``[[hold]]`` tables in a ConfigMap key (every
node), and a node annotation holding JSON (this node), read at every tick.

```
# the shipped DaemonSet reads namespace "guardian" ([holds.kube] namespace; unset: kube-system)
kubectl -n guardian create configmap guardian-holds --from-file=holds.toml
kubectl annotate node n1 guardian.io/hold='{"until": "2026-12-05T06:00:00Z",
  "reason": "kernel rollout", "author": "alice"}'
```
The same read of the node gives the approvals of rules whose disruptive actions wait for
one (``approve``): the annotation ``guardian.io/approve`` holds one (JSON) or a list,
each naming the rule, who, why and when (``at``, RFC 3339 with a zone: only a wait that
began at or before then is approved)::

    kubectl annotate --overwrite node n1 guardian.io/approve="{\"rule\": \"nic-stall\",
      \"by\": \"alice\", \"why\": \"drained by hand\", \"at\": \"$(date -u +%FT%TZ)\"}"

Whoever may patch the node (RBAC) may approve; one that cannot be parsed approves
nothing. When the API cannot be read, the holds last read stay in force (until they expire): a
pause must not lift because the API server is busy. A key or annotation that cannot be
parsed, in whole or in one entry, holds every rule until it is fixed (the holds last
read stay in force beside it). The cost: one GET of the ConfigMap and
one of this node a tick (at 15 s ticks, a thousand nodes make ~130 requests a second;
``annotation = ""`` halves it). With ``[fleet.breaker]`` on the same node and
credentials, one reader (:class:`guardian.kube.breaker.KubeBreaker`) makes these reads
and the breaker's: the node is read once a tick for both.

The API is read off the loop. :meth:`KubeHolds.read` (the loop's, at every tick) starts a
read on a worker thread unless one is under way, waits for it at most ``wait`` (0.2 s)
and answers with the holds of the last read that finished: an API server that answers
slowly, or drips its answer a byte at a time, costs a tick at most that, never READY, the
watchdog or SIGTERM, and the holds it last gave stay in force meanwhile. Only the very
first read (``run --once``, ``guardian act``, a service's first tick) waits for its
answer, and no longer than ``timeout``. A read is bounded as a whole: every socket
operation of both requests waits at most what is left of ``timeout`` (the whole read),
so a server that drips is cut when it passes, never by a per-read timeout each byte
renews.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpcore2
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap, Node
from pydantic import Field

from guardian.kube.actions import API_ERRORS, _why
from guardian.kube.client import KubeParams, make_client, no_credentials, node_name
from guardian.model.approvals import Approval, parse_approvals
from guardian.model.holds import Hold, parse_holds

log = logging.getLogger("guardian.holds")


class KubeHoldsParams(KubeParams):
    timeout: float = Field(3.0, gt=0, le=30, description="seconds for a whole read of "
                           "the holds (both requests; read off the loop, the last read "
                           "that finished used at each tick)")
    namespace: str = "kube-system"
    configmap: str = Field("guardian-holds", description="a ConfigMap of holds for every "
                           "node (\"\" for none)")
    key: str = Field("holds.toml", description="its key: [[hold]] tables")
    annotation: str = Field("guardian.io/hold", description="a node annotation: one hold "
                            "(JSON) or a list of them, for this node only (\"\" for none)")
    approve_annotation: str = Field(
        "guardian.io/approve", description="a node annotation: one approval (JSON: rule, "
        "by, why, at) or a list of them, for the rules of this node that wait for one "
        "(\"\" for none)")


class _Cut:
    """The monotonic time past which the read under way is cut (None: none is)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def left(self, timeout: float | None, exc: type[Exception]) -> float | None:
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise exc("the whole read's deadline passed")
        return left if timeout is None else min(timeout, left)


class _CutStream(httpcore2.NetworkStream):
    """A connection whose every operation waits at most what is left of the read's
    deadline: a server that drips bytes is cut when it passes."""

    def __init__(self, inner: httpcore2.NetworkStream, cut: _Cut) -> None:
        self.inner, self.cut = inner, cut

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self.cut.left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self.cut.left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _CutStream(self.inner.start_tls(
            ssl_context, server_hostname, self.cut.left(timeout, httpcore2.ConnectTimeout)),
            self.cut)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _CutBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend, cut: _Cut) -> None:
        self.inner, self.cut = inner, cut

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None, socket_options: Any = None
                    ) -> httpcore2.NetworkStream:
        return _CutStream(self.inner.connect_tcp(
            host, port, self.cut.left(timeout, httpcore2.ConnectTimeout), local_address,
            socket_options), self.cut)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore2.NetworkStream:
        return _CutStream(self.inner.connect_unix_socket(
            path, self.cut.left(timeout, httpcore2.ConnectTimeout), socket_options),
            self.cut)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _bound_whole(client: Client, cut: _Cut) -> bool:
    """Put the client's connections under ``cut``; False where this lightkube and httpx
    keep their connection pool elsewhere (each read is then bounded per operation only,
    and the loop still never waits for it past ``wait``)."""
    pool = getattr(getattr(getattr(getattr(client, "_client", None), "_client", None),
                           "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore2.NetworkBackend):
        return False
    pool._network_backend = _CutBackend(backend, cut)  # type: ignore[union-attr]
    return True


class KubeHolds:
    """Reads the ConfigMap and this node's annotation off the loop; :meth:`read` at every
    tick answers at once with the last read's holds (see the module)."""

    wait = 0.2  # the most a tick waits for a read it started
    reads_node = False  # read this node at every read even without its annotations

    def __init__(self, params: KubeHoldsParams) -> None:
        self.p = params
        self.me = node_name(params)
        self._client: Client | None = None
        self.cut = _Cut()
        self.last: dict[str, list[Hold]] = {"configmap": [], "annotation": []}
        # this node's Node object as the read under way got it (None: not read, or
        # its read failed): a subclass's consumer of the same read (kube/breaker)
        self.node: Node | None = None
        self.last_approvals: list[Approval] = []  # as the node last read gave them
        self.said: set[str] = set()  # problems already logged
        # what the last read that finished could not read, and why (what it holds is
        # unknown: the holds last read stand for it): `guardian holds` says so
        self.unread: dict[str, str] = {}
        self._missed: dict[str, str] = {}  # the same, for the read under way
        # this node's labels as last read with its annotation (None: not read yet): its
        # node group (guardian.model.nodegroups)
        self.labels: dict[str, str] | None = None
        self.reads = 0  # reads that finished (answered or failed)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._done = threading.Event()

    @property
    def client(self) -> Client:
        if self._client is None:  # made when first needed: no credentials is an error
            self._client = make_client(self.p)  # a tick reports, not a start-up crash
            if not _bound_whole(self._client, self.cut):
                self._say("cannot bound an API read as a whole in this lightkube; each "
                          "request is bounded per read, off the loop")
        return self._client

    def approvals(self) -> list[Approval]:
        """The approvals of the last read of the node that finished: never blocks."""
        with self._lock:
            return list(self.last_approvals)

    def holds(self) -> list[Hold]:
        """The holds of the last read that finished: never blocks."""
        with self._lock:
            return [h for part in self.last.values() for h in part]

    def unknown(self) -> list[str]:
        """What the last read that finished could not read, each ``what: why`` (none
        read yet: nothing said); what those hold is unknown."""
        with self._lock:
            return [f"{what}: {why}" for what, why in self.unread.items()]

    def _miss(self, what: str, why: str) -> None:
        """``what`` could not be read in the read under way: said once, and kept."""
        self._missed[what] = why
        self._say(f"{what}: {why}; keeping the holds last read")

    def read(self) -> list[Hold]:
        """The holds now: a read is started off the loop unless one is under way; this
        waits for it at most ``wait`` (the first read: ``timeout``), then answers with
        the last good holds."""
        with self._lock:
            busy = self._worker is not None and self._worker.is_alive()
            if not busy:
                first = self.reads == 0
                self._done = threading.Event()
                worker = threading.Thread(target=self._read_whole, args=(self._done,),
                                          name="guardian-kube-holds", daemon=True)
                try:
                    worker.start()
                except RuntimeError as exc:  # no thread to be had (a task limit)
                    self._say(f"cannot start a thread to read the API: {exc}; keeping "
                              "the holds last read")
                else:
                    self._worker = worker
            done = self._done
        if not busy:
            done.wait(self.p.timeout + 0.5 if first else self.wait)
        return self.holds()

    def fetch(self) -> list[Hold]:
        """One whole read now, on this thread (bounded by ``timeout``); the holds after
        it, as :meth:`read` answers them."""
        self._read_whole(threading.Event())
        return self.holds()

    def _read_whole(self, done: threading.Event) -> None:
        self.cut.at = time.monotonic() + self.p.timeout
        self._missed = {}
        try:
            parts = self._read_api()
            with self._lock:
                self.last, self.unread = parts, dict(self._missed)
        except Exception as exc:  # a bug here must not end the reads
            self._say(f"reading the holds failed: {exc!r}; keeping the holds last read")
            with self._lock:
                self.unread = {"the Kubernetes holds": f"reading failed: {exc!r}"}
        finally:
            self.cut.at = None
            with self._lock:
                self.reads += 1
            done.set()

    def _read_api(self) -> dict[str, list[Hold]]:
        """What the API holds now, each part (``configmap``, ``annotation``) the last
        good one where it cannot be read."""
        p = self.p
        configmap, annotation = self.last["configmap"], self.last["annotation"]
        self.node = None
        where = f"configmap {p.namespace}/{p.configmap}"
        reads_node = bool(p.annotation or p.approve_annotation or self.reads_node)
        try:
            client = self.client
        except Exception as exc:  # lightkube's: no kubeconfig, no service account
            why = no_credentials(exc)
            if p.configmap:
                self._miss(where, why)
            if reads_node:
                self._node_unread(why)
            return {"configmap": configmap, "annotation": annotation}
        if p.configmap:
            try:
                cm = client.get(ConfigMap, name=p.configmap, namespace=p.namespace)
                text = (cm.data or {}).get(p.key, "")
                configmap = self._parse(text, f"{where}:{p.key}", "toml", configmap)
            except ApiError as exc:
                if exc.status.code == 404:
                    configmap = []
                else:
                    self._miss(where, _why(exc))
            except API_ERRORS as exc:
                self._miss(where, _why(exc))
        if reads_node:
            try:
                node = self.node = client.get(Node, name=self.me)
                self.labels = dict((node.metadata and node.metadata.labels) or {})
                notes = (node.metadata and node.metadata.annotations) or {}
                if p.annotation:
                    annotation = self._parse(notes.get(p.annotation, ""),
                                             f"node {self.me} annotation {p.annotation}",
                                             "json", annotation)
                if p.approve_annotation:
                    self._approvals(notes.get(p.approve_annotation, ""))
            except API_ERRORS as exc:
                self._node_unread(_why(exc))
        return {"configmap": configmap, "annotation": annotation}

    def _node_unread(self, why: str) -> None:
        """This node could not be read: its hold annotation is unknown (its labels as
        last read stand; never read, every breaker latch holds it: that is known)."""
        if self.p.annotation:
            self._miss(f"node {self.me} annotation {self.p.annotation}", why)
        else:
            self._say(f"node {self.me}: {why}; its labels as last read stand")

    def _approvals(self, text: str) -> None:
        """The approvals in the node's annotation (none where it cannot be parsed)."""
        found: list[Approval] = []
        if text.strip():
            source = f"node {self.me} annotation {self.p.approve_annotation}"
            found, problems = parse_approvals(text, source)
            for problem in problems:
                self._say(f"{problem}; it approves nothing")
        with self._lock:
            self.last_approvals = found

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
