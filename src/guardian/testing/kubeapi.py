"""A stand-in Kubernetes API server for tests and benchmarks: the real wire format (paths,
JSON bodies, Status objects, resourceVersion conflicts as 409, PDB-blocked evictions as
429, Leases), served over HTTP on loopback, every request recorded (``Store.requests``:
method and path). Only what guardian and `kubectl get/cordon/uncordon/drain` use is
implemented; kubectl, written by others, checks its fidelity
(tests/system/test_kube_standin.py). ``Store.sent`` records each answer's method, path and
body size in bytes (bench/fleet.py counts what the API server sends). The tests import it
as tests/support/kube_standin.py."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

CORE = [("nodes", "Node", False, ["get", "list", "patch", "update"]),
        ("nodes/status", "Node", False, ["get", "patch"]),
        ("pods", "Pod", True, ["get", "list", "delete"]),
        ("pods/eviction", "Eviction", True, ["create"]),
        ("events", "Event", True, ["create", "list"]),
        ("namespaces", "Namespace", False, ["get", "list"]),
        ("configmaps", "ConfigMap", True, ["get", "list", "create"]),
        ("serviceaccounts", "ServiceAccount", True, ["get", "list", "create"])]
GROUPS = {
    ("policy", "v1"): [("poddisruptionbudgets", "PodDisruptionBudget", True, ["get", "list"])],
    ("apps", "v1"): [("daemonsets", "DaemonSet", True, ["get", "list"])],
    # what deploy/kubernetes holds, so `kubectl apply --dry-run=client` can map its kinds
    ("admissionregistration.k8s.io", "v1"): [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False, ["get", "list"]),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False,
         ["get", "list"])],
    ("monitoring.coreos.com", "v1"): [("podmonitors", "PodMonitor", True, ["get", "list"])],
    ("coordination.k8s.io", "v1"): [("leases", "Lease", True,
                                     ["get", "list", "create", "update", "delete"])],
    ("rbac.authorization.k8s.io", "v1"): [
        (r, k, nsd, ["get", "list", "create"]) for r, k, nsd in (
            ("clusterroles", "ClusterRole", False), ("clusterrolebindings",
                                                     "ClusterRoleBinding", False),
            ("roles", "Role", True), ("rolebindings", "RoleBinding", True))],
}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 400 else "Failure", "message": message,
            "reason": reason, "code": code}


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch, with strategic merge of lists of objects keyed by `type`
    (node conditions) as the API server does."""
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return copy.deepcopy(patch)
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif k == "conditions" and isinstance(v, list) and isinstance(base.get(k), list):
            by_type = {c.get("type"): c for c in base[k]}
            for c in v:
                by_type[c.get("type")] = {**by_type.get(c.get("type"), {}), **c}
            out[k] = list(by_type.values())
        else:
            out[k] = _merge(base.get(k), v)
    return out


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rv = itertools.count(1000)
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.fail_next: list[int] = []  # status codes to answer the next requests with
        self.delay = 0.0
        # > 0: every answer from now on is sent one byte every `drip` seconds (a hostile or
        # failing API server: every read gets a byte, so no per-read timeout fires);
        # `dripping` counts the answers being dripped, `stop` (set when the stand-in
        # stops) ends them
        self.drip = 0.0
        self.dripping = 0
        self.stop = threading.Event()
        self.drip_lock = threading.Lock()  # not `lock`: an answer may be sent under it
        self.requests: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str, int]] = []  # each answer: method, path, body bytes
        self.authorization: list[str] = []
        # a deleted pod stays, with its deletionTimestamp, until its containers have
        # stopped (the kubelet's confirmation): (namespace, name) -> when it goes
        self.terminating: dict[tuple[str, str], float] = {}
        self.shutdown: dict[tuple[str, str], float] = {}  # how long a pod takes to stop

    def reap(self) -> None:
        """Remove the terminating pods whose time has come (called under the lock)."""
        now = time.monotonic()
        for key, at in list(self.terminating.items()):
            if at <= now:
                del self.terminating[key]
                self.objects.get("pods", {}).pop(key, None)

    def terminate(self, ns: str, name: str, grace: int | None) -> None:
        """A graceful delete: the pod gets its deletionTimestamp and goes once it has
        stopped, within its grace period (the request's, else the pod's
        terminationGracePeriodSeconds, 30 by default: k8s.io/api core/v1 PodSpec)."""
        pod = self.objects["pods"][(ns, name)]
        if (ns, name) in self.terminating:
            return
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        takes = min(self.shutdown.get((ns, name), 0.0), float(grace))
        pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.put("pods", pod)
        self.terminating[(ns, name)] = time.monotonic() + takes

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-12-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self.rv))
        self.objects.setdefault(kind, {})[(meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def add_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": labels or {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                 "lastTransitionTime": "2026-12-01T00:00:00Z"}],
                "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()),
                             "containerRuntimeVersion": "containerd://1.7.24",
                             "kernelVersion": "6.1.0", "kubeProxyVersion": "v1.32.0",
                             "kubeletVersion": "v1.32.0", "machineID": uuid.uuid4().hex,
                             "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12",
                             "systemUUID": str(uuid.uuid4())}}})

    def add_pod(self, ns: str, name: str, node: str, labels: dict[str, str] | None = None,
                owner: tuple[str, str] | None = None, priority: int = 0,
                qos: str = "BestEffort", emptydir: bool = False,
                shutdown: float = 0.0, phase: str = "Running") -> None:
        """A pod; ``shutdown``: seconds its containers take to stop once it is deleted."""
        meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0],
                                        "name": owner[1], "uid": str(uuid.uuid4()),
                                        "controller": True}]
        spec: dict[str, Any] = {"nodeName": node, "priority": priority,
                                "containers": [{"name": "c", "image": "x"}]}
        if emptydir:
            spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        self.shutdown[(ns, name)] = shutdown
        self.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                          "status": {"phase": phase, "qosClass": qos}})

    def add_pdb(self, ns: str, name: str, selector: dict[str, str], min_available: int) -> None:
        self.put("poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": selector}}})

    def add_daemonset(self, ns: str, name: str) -> None:
        self.put("daemonsets", {"apiVersion": "apps/v1", "kind": "DaemonSet",
                                "metadata": {"name": name, "namespace": ns}, "spec": {}})


class _Handler(BaseHTTPRequestHandler):
    store: Store
    protocol_version = "HTTP/1.1"
    # headers and body go out as two writes: without TCP_NODELAY, Nagle holds the body
    # until the client's delayed ACK (~40 ms a request on Linux)
    disable_nagle_algorithm = True
    asked: tuple[str, str] = ("", "")  # the request being answered: method, path

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.store.sent.append((*self.asked, len(data)))
        if self.store.drip:
            self._drip(code, data)
            return
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)  # the client may have given up (a timeout test)

    def _drip(self, code: int, data: bytes) -> None:
        """The whole answer, head and body, a byte at a time until the stand-in stops."""
        st = self.store
        raw = (f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
               "\r\n").encode() + data
        self.close_connection = True
        with st.drip_lock:
            st.dripping += 1
        try:
            for byte in raw:
                if st.stop.wait(st.drip):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:  # the client gave up
            return
        finally:
            with st.drip_lock:
                st.dripping -= 1

    def _body(self) -> Any:
        return json.loads(self.raw or b"{}")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        # read the whole body first, whatever happens next: bytes left on a keep-alive
        # connection would be taken for the next request (kubectl may send protobuf,
        # e.g. an Eviction, whose content this stand-in does not need)
        self.raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        st = self.store
        url = urlparse(self.path)
        self.asked = (method, url.path)
        st.requests.append((method, url.path))
        st.authorization.append(self.headers.get("Authorization", ""))
        if st.delay:
            time.sleep(st.delay)
        with st.lock:
            st.reap()
            if st.fail_next:
                code = st.fail_next.pop(0)
                self._send(code, status(code, "InternalError", "injected failure"))
                return
            try:
                code, body = self._handle(method, url.path.rstrip("/").split("/")[1:],
                                          parse_qs(url.query))
            except (ValueError, KeyError) as exc:
                code, body = 400, status(400, "BadRequest", str(exc))
        self._send(code, body)

    def _handle(self, method: str, parts: list[str], q: dict[str, list[str]]
                ) -> tuple[int, dict[str, Any]]:
        if parts == ["version"]:
            return 200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin",
                         "platform": "linux/amd64"}
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"],
                         "serverAddressByClientCIDRs": []}
        if parts == ["apis"]:
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                for g, v in GROUPS]}
        if parts == ["api", "v1"]:
            return 200, _resource_list("v1", CORE)
        if len(parts) == 3 and parts[0] == "apis" and (parts[1], parts[2]) in GROUPS:
            return 200, _resource_list(f"{parts[1]}/{parts[2]}", GROUPS[(parts[1], parts[2])])
        # /api/v1/... or /apis/g/v/... -> (namespace, resource, name, sub)
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        ns = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        resource = rest[0] if rest else ""
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return self._resource(method, resource, ns, name, sub, q)

    def _resource(self, method: str, resource: str, ns: str, name: str, sub: str,
                  q: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        st = self.store
        objs = st.objects.setdefault(resource, {})
        kind = {"nodes": "Node", "pods": "Pod", "leases": "Lease", "events": "Event",
                "poddisruptionbudgets": "PodDisruptionBudget", "daemonsets": "DaemonSet",
                "namespaces": "Namespace", "configmaps": "ConfigMap"}.get(resource)
        if kind is None:
            return 404, status(404, "NotFound", f"the server could not find the requested "
                                                f"resource ({resource})")
        if not name and method == "GET":
            items = [o for (ons, _), o in sorted(objs.items()) if not ns or ons == ns]
            for sel in q.get("fieldSelector", []):
                for term in sel.split(","):
                    field, _, want = term.partition("=")
                    if field == "spec.nodeName":
                        items = [o for o in items if o["spec"].get("nodeName") == want]
                    elif field == "metadata.name":
                        items = [o for o in items if o["metadata"]["name"] == want]
            for sel in q.get("labelSelector", []):
                want_labels = dict(t.split("=", 1) for t in sel.split(",") if "=" in t)
                items = [o for o in items
                         if _labels_match(want_labels, o["metadata"].get("labels", {}))]
            return 200, {"kind": f"{kind}List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(next(st.rv))}, "items": items}
        if method == "POST" and not name:
            body = self._body()
            key = (ns, body["metadata"]["name"]) if resource != "events" else \
                (ns, body["metadata"].get("name") or str(uuid.uuid4()))
            body["metadata"]["name"] = key[1]
            if key in objs:
                return 409, status(409, "AlreadyExists", f'{resource} "{key[1]}" already '
                                                         f'exists')
            body["metadata"]["namespace"] = ns
            return 201, st.put(resource, body)
        key = (ns, name)
        obj = objs.get(key)
        if method == "POST" and sub == "eviction":
            if obj is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found')
            return self._evict(ns, name, obj)
        if obj is None:
            return 404, status(404, "NotFound", f'{resource} "{name}" not found')
        if method == "GET":
            return 200, obj
        if method == "DELETE":
            if resource == "pods":  # graceful, as the API server deletes a pod
                grace: Any = q["gracePeriodSeconds"][0] if q.get("gracePeriodSeconds") else None
                if grace is None:
                    grace = (self._body() or {}).get("gracePeriodSeconds")
                st.terminate(ns, name, None if grace is None else int(grace))
                if st.terminating[key] <= time.monotonic():
                    st.reap()
                return 200, obj
            del objs[key]
            return 200, obj
        if method == "PATCH":
            body = self._body()
            # a resourceVersion in the patch is a precondition: the patch is applied to the
            # stored object and the update of a different resourceVersion is 409 Conflict
            # (k8s.io/apiserver pkg/registry/generic/registry/store.go Update; "Patch" in
            # the API concepts). kubectl's patches carry none, so they always apply.
            want_rv = body.get("metadata", {}).get("resourceVersion") \
                if isinstance(body, dict) else None
            if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on '
                                   f'{resource} "{name}": the object has been modified; '
                                   f'please apply your changes to the latest version and '
                                   f'try again')
            merged = _merge(obj, body)
            merged["metadata"]["name"] = name
            return 200, st.put(resource, merged)
        if method == "PUT":
            body = self._body()
            if body.get("metadata", {}).get("resourceVersion") != \
                    obj["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on '
                                   f'{resource} "{name}": the object has been modified; '
                                   f'please apply your changes to the latest version and '
                                   f'try again')
            body["metadata"]["namespace"] = ns
            return 200, st.put(resource, body)
        return 405, status(405, "MethodNotAllowed", method)

    def _evict(self, ns: str, name: str, pod: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        st = self.store
        labels = pod["metadata"].get("labels", {})
        if pod["metadata"].get("deletionTimestamp"):
            return 201, status(201, "", "")  # already going
        # the disruption controller counts a pod being deleted as not healthy
        # (k8s.io/kubernetes pkg/controller/disruption countHealthyPods)
        pods = [p for (pns, _), p in st.objects.get("pods", {}).items()
                if pns == ns and not p["metadata"].get("deletionTimestamp")]
        for pdb in [o for (pns, _), o in st.objects.get("poddisruptionbudgets", {}).items()
                    if pns == ns]:
            sel = pdb["spec"]["selector"].get("matchLabels", {})
            if not _labels_match(sel, labels):
                continue
            healthy = sum(1 for p in pods if _labels_match(sel, p["metadata"].get("labels",
                                                                                    {})))
            if healthy - 1 < int(pdb["spec"].get("minAvailable", 0)):
                return 429, status(429, "TooManyRequests", "Cannot evict pod as it would "
                                   "violate the pod's disruption budget.")
        # an accepted eviction is a graceful delete of the pod with the Eviction's
        # deleteOptions (policy/v1 Eviction; pkg/registry/core/pod/storage/eviction.go)
        try:
            body = self._body()
        except ValueError:  # kubectl may send the Eviction as protobuf
            body = {}
        grace = ((body or {}).get("deleteOptions") or {}).get("gracePeriodSeconds")
        st.terminate(ns, name, grace)
        if st.terminating[(ns, name)] <= time.monotonic():
            st.reap()
        return 201, status(201, "", "")


def _resource_list(group_version: str, resources: list[tuple[str, str, bool, list[str]]]
                   ) -> dict[str, Any]:
    out = []
    for n, k, nsd, verbs in resources:
        r: dict[str, Any] = {"name": n, "singularName": "", "namespaced": nsd, "kind": k,
                             "verbs": verbs}
        if n == "pods/eviction":  # how clients learn that evictions are policy/v1
            r.update(group="policy", version="v1")
        out.append(r)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": out}


@contextmanager
def serve(tls: tuple[str, str] | None = None) -> Iterator[tuple[str, Store]]:
    """Serve a fresh stand-in on a free loopback port; yields (URL, store). With ``tls``
    (certificate, key) it speaks HTTPS, as a real API server does."""
    store = Store()
    handler = type("Handler", (_Handler,), {"store": store})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    scheme = "http"
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}", store
    finally:
        store.stop.set()
        server.shutdown()
        server.server_close()


def kubectl(kubeconfig: Path, *args: str, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout)


def kubeconfig(tmp_path: Path, url: str) -> Path:
    p = tmp_path / "kubeconfig"
    p.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "u"}}]}))
    return p

