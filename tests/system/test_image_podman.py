"""The DaemonSet's image under a real container runtime: the Containerfile built by
Debian's podman (4.3; runc, the overlay driver, cgroupfs, host networking) and started as
deploy/kubernetes/daemonset.yaml describes it: host PID and network, read-only root, the
ConfigMaps of deploy/kubernetes/configmap.yaml laid out as the kubelet lays them out
(``..data`` -> ``..<timestamp>`` and a link per key; the config file by ``subPath``), the
service account's token and CA mounted where the kubelet puts them, and the API stand-in
(tests/support/kube_standin.py) as its in-cluster API server over TLS. Privileged, and with the
unprivileged overlay (deploy/kubernetes-unprivileged).

``FROM debian:bookworm-slim`` is satisfied offline: the Debian 12 debootstrap root the
systemd tests cache (src/guardian/testing/nspawn.py), without systemctl (the slim image has none),
imported under that name when podman has no such image yet."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from guardian.testing.nspawn import RootUnavailable, build_root, refused
from tests.support.checkout import REPO, copy_checkout
from tests.support.kernel import inject_kmsg
from tests.support.kube_standin import Store, serve
from tests.support.podman import RUNTIME_REFUSED, podman_argv
from tests.support.wait import wait_until

# Builds and starts containers: run on the default interpreter only (.ci/run).
# (host_global too: it writes the host's kernel log)
pytestmark = [pytest.mark.os_integration, pytest.mark.host_global]

IMAGE = "localhost/node-guardian:ci"
BASE = "debian:bookworm-slim"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NODE = "node-a"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # pip inside the build trusts it


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("podman", "debootstrap", "openssl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs podman, runc, debootstrap)"
    return None


def podman(*args: str, check: bool = True, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(podman_argv(*args), capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"podman {args[0]} exited {out.returncode}: {out.stderr[-2000:]}")
    return out


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    why = _unavailable()
    if why:
        pytest.skip(why)
    if podman("image", "exists", BASE, check=False).returncode != 0:
        try:
            root = build_root()
        except RootUnavailable as exc:
            pytest.skip(str(exc))
        tar = subprocess.Popen(["tar", "-C", str(root), "--exclude=./usr/bin/systemctl",
                                "--exclude=./proc/*", "--exclude=./sys/*", "-c", "."],
                               stdout=subprocess.PIPE)
        subprocess.run(["podman", "import", "-", BASE], stdin=tar.stdout, check=True,
                       capture_output=True, timeout=300)
        assert tar.wait() == 0
    # once: can podman's runtime start a container on this host's cgroup layout at all?
    why = refused(podman_argv("run", "--rm", "--network=none", BASE, "true"),
                  RUNTIME_REFUSED)
    if why:
        pytest.skip(f"{why} (.ci/run installs runc; these tests use it where it is installed)")
    tree = copy_checkout(tmp_path_factory.mktemp("checkout") / "guardian")
    ca = ["--volume", f"{CA_BUNDLE}:/run/ca.crt:ro", "--build-arg", "PIP_CERT=/run/ca.crt"] \
        if CA_BUNDLE.exists() else []
    build = podman("build", "--network=host", *ca, "-t", IMAGE, "-f", "Containerfile",
                   str(tree), check=False, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return IMAGE


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "tls.crt", d / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The ``replace``, ``add`` and ``remove`` operations of RFC 6902 the overlay uses."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].lstrip("/").split("/")]
        node: Any = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, op["value"])
            elif op["op"] == "remove":
                del node[index]
            else:
                node[index] = op["value"]
        elif op["op"] == "remove":
            del node[last]
        else:
            node[last] = op["value"]


def manifests(overlay: str | None) -> dict[str, dict[str, Any]]:
    """The DaemonSet and ConfigMaps by name, with an overlay's JSON patches applied (what
    `kubectl kustomize` renders; tests/system/test_daemonset.py checks it with kubectl)."""
    base = REPO / "deploy" / "kubernetes"
    docs = {d["metadata"]["name"]: d
            for f in ("daemonset.yaml", "configmap.yaml", "rules.yaml")
            for d in _docs(base / f)}
    if overlay:
        kust = yaml.safe_load((REPO / "deploy" / overlay / "kustomization.yaml").read_text())
        for patch in kust.get("patches", []):
            ops = patch.get("patch") or (REPO / "deploy" / overlay / patch["path"]).read_text()
            _json_patch(docs[patch["target"]["name"]], yaml.safe_load(ops))
    return docs


def kubelet_volume(where: Path, data: dict[str, str]) -> Path:
    """A ConfigMap volume as the kubelet's atomic writer makes it: the files in a
    ``..<timestamp>`` directory, ``..data`` linking to it, and a link per key."""
    where.mkdir(parents=True)
    stamp = where / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{uuid.uuid4().int % 10**9}"
    stamp.mkdir(mode=0o755)
    for key, text in data.items():
        (stamp / key).write_text(text)
        (stamp / key).chmod(0o644)
        (where / key).symlink_to(f"..data/{key}")
    (where / "..data").symlink_to(stamp.name)
    return where


def _made(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pod:
    """One container started from the DaemonSet's pod spec."""

    def __init__(self, name: str, port: int, state: Path) -> None:
        self.name, self.port, self.state = name, port, state

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def running(self) -> bool:
        out = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return out.stdout.strip() == "true"

    def wait_healthz(self, timeout: float = 60) -> str:
        said = [""]

        def healthy() -> bool:
            assert self.running(), self.logs()
            code, said[0] = self.http("/healthz")
            return code == 200 and "the last tick completed" in said[0]

        try:
            wait_until(healthy, "a healthy /healthz", timeout, every=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {said[0]}\n{self.logs()}") from None
        return said[0]

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, check=False)

    def stop(self) -> int:
        """``podman stop`` with the pod's default grace period (30 s): the container's exit
        code (137 when it was killed at the end of the grace period)."""
        podman("stop", "--time=30", self.name, timeout=60)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout
        return int(code.strip())


@contextlib.contextmanager
def pod(image: str, tmp: Path, api: str, tls_cert: Path, overlay: str | None = None,
        config_extra: str = "", state: Path | None = None, kmsg_user: bool = False
        ) -> Iterator[Pod]:
    """Start the image as the DaemonSet's pod spec says (with ``overlay`` applied)."""
    docs = manifests(overlay)
    spec = docs["guardian"]["spec"]["template"]["spec"]
    [c] = spec["containers"]
    sc = c["securityContext"]
    config = docs["guardian-config"]["data"]
    rules = docs["guardian-rules"]["data"]
    toml = config["guardian.toml"]
    if kmsg_user:  # the ConfigMap has the table: the setting goes into it
        assert toml.count("[sources.kmsg]\n") == 1
        toml = toml.replace("[sources.kmsg]\n", f"[sources.kmsg]\n{KMSG_USER}")
        # no lookback: lines other tests left in the last minutes must not fire the rule
        # first; what is read back is what the kept position says (a unit test has the
        # lookback: tests/system/test_kmsg_position.py)
        toml = toml.replace('lookback = "5m"', 'lookback = "0s"')
    config = {**config, "guardian.toml": toml + config_extra}
    tmp.mkdir(parents=True, exist_ok=True)
    name = f"guardian-test-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    sa = tmp / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("in-cluster-token")
    (sa / "namespace").write_text("guardian")
    shutil.copy(tls_cert, sa / "ca.crt")
    state = state or tmp / "state"
    state.mkdir(exist_ok=True)
    run_systemd = tmp / "run-systemd"  # no systemd runs as PID 1 on this machine
    run_systemd.mkdir()
    volumes = {"config": kubelet_volume(tmp / "config", config),
               "rules": kubelet_volume(tmp / "rules", rules),
               "sys": Path("/sys"), "cgroup": Path("/sys/fs/cgroup"),
               "kmsg": Path("/dev/kmsg"), "state": state,
               "systemd": run_systemd,
               # the node's /run (node.reboot's sentinel): a directory of the test's own
               "host-run": _made(tmp / "host-run")}
    args = ["run", "-d", "--name", name, "--pid=host", "--network=host",
            "--read-only", "--stop-timeout=30", *LIMITS]
    if sc.get("privileged"):
        args.append("--privileged")
    for cap in sc.get("capabilities", {}).get("add", []):
        args.append(f"--cap-add={cap}")
    for m in c["volumeMounts"]:
        src = volumes[m["name"]]
        if "subPath" in m:  # the kubelet bind-mounts the file the key's link resolves to
            src = (src / m["subPath"]).resolve()
        ro = ":ro" if m.get("readOnly") else ""
        args.append(f"--volume={src}:{m['mountPath']}{ro}")
    args.append(f"--volume={sa}:{SA_DIR}:ro")
    host, _, api_port = api.removeprefix("https://").partition(":")
    # the port: a free one, by the environment (as the address), so that `guardian
    # health` run inside finds the service as an exec probe would
    env = {"NODE_NAME": NODE, "NODE_IP": "127.0.0.1", "KUBERNETES_SERVICE_HOST": host,
           "KUBERNETES_SERVICE_PORT": api_port, "GUARDIAN_METRICS_PORT": str(port)}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"].replace("$(NODE_IP)", env["NODE_IP"])
    for k, v in env.items():
        args.append(f"--env={k}={v}")
    cargs = [a.replace("$(NODE_IP)", env["NODE_IP"]) for a in c["args"]]
    podman(*args, image, *cargs)
    p = Pod(name, port, state)
    try:
        yield p
    finally:
        podman("rm", "--force", "--time=0", name, check=False)


@pytest.fixture
def api(tls: tuple[Path, Path]) -> Iterator[tuple[str, Store]]:
    with serve(tls=(str(tls[0]), str(tls[1]))) as (url, store):
        store.add_node(NODE)
        yield url, store


def _condition(store: Store, kind: str) -> dict[str, Any] | None:
    node = store.objects["nodes"][("", NODE)]
    return next((c for c in node.get("status", {}).get("conditions", [])
                 if c.get("type") == kind), None)


# the kernel log as the injected line reaches guardian: a write to /dev/kmsg carries the
# user facility (tests/support/kernel.py), which the test's config lets match
KMSG_USER = 'facilities = ["kern", "user"]\n'
# podman's default limits (1048576 files) are above what a machine without
# CAP_SYS_RESOURCE (some CI sandboxes) may set: ordinary values instead
LIMITS = [f"--ulimit=nofile={min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)}",
          "--ulimit=nproc=4096"]
# the next tick an hour away: a SIGTERM that waited for it would be killed at the grace
# period (30 s), exit 137
INTERVAL_1H = '\n[engine]\ninterval = "1h"\n'


def test_privileged_runs_acts_on_the_api_reads_back_kmsg_and_stops_at_once(
        image: str, api: tuple[str, Store], tls: tuple[Path, Path], tmp_path: Path) -> None:
    """Before: exit 78 at once (no Kubernetes extra in the image); a kernel line logged
    while the pod was down never seen; `podman stop` at a 45 s interval SIGKILLed after
    the 30 s grace period (exit 137)."""
    url, store = api
    state = tmp_path / "state"
    with pod(image, tmp_path / "a", url, tls[0], config_extra=INTERVAL_1H, state=state,
             kmsg_user=True) as p:
        body = p.wait_healthz()
        # the kernel log and the host's cgroups (under podman's tmpfs, through PID 1's
        # mounts) are read; the systemd source may be named (this machine's PID 1 is no
        # systemd)
        assert body.startswith(("ok: ", "degraded: ")) and "source kmsg" not in body, body
        assert "source cgroups" not in body, body
        check = p.exec("/opt/guardian/bin/guardian", "check",
                       "--config=/etc/guardian/guardian.toml")
        assert check.returncode == 0, check.stdout + check.stderr
        # an exec liveness probe's words: alive, degraded or not
        health = p.exec("/opt/guardian/bin/guardian", "health", "--live")
        assert health.returncode == 0, health.stdout + health.stderr
        # asked plainly, degraded is its own exit code (3), never ok
        plain = p.exec("/opt/guardian/bin/guardian", "health")
        assert plain.returncode == (3 if body.startswith("degraded") else 0), \
            (body, plain.returncode, plain.stdout + plain.stderr)
        code = p.stop()
        assert code == 0, (code, p.logs())
    # logged while no guardian ran: the next one reads it back from where the last stopped
    inject_kmsg(f"EXT4-fs (gt{uuid.uuid4().hex[:4]}): Remounting filesystem read-only")
    with pod(image, tmp_path / "b", url, tls[0], config_extra=INTERVAL_1H, state=state,
             kmsg_user=True) as p:
        p.wait_healthz()
        with contextlib.suppress(AssertionError):  # said below, with what was kept
            wait_until(lambda: _condition(store, "ReadonlyFilesystem") is not None,
                       "the ReadonlyFilesystem condition", every=0.3)
        cond = _condition(store, "ReadonlyFilesystem")
        kept = {f.name: f.read_text()[:200] for f in state.glob("kmsg-*")}
        assert cond is not None and cond["status"] == "True", (kept, p.logs())
        assert cond["reason"] == "FilesystemIsReadOnly"
        assert store.authorization and set(store.authorization) == {"Bearer in-cluster-token"}
        code = p.stop()  # an hour's interval: SIGTERM is handled before the next tick
        assert code == 0, (code, p.logs())


def test_unprivileged_overlay_says_what_it_cannot_read(
        image: str, api: tuple[str, Store], tls: tuple[Path, Path], tmp_path: Path) -> None:
    """Before: /dev/kmsg cannot be opened without `privileged`, yet /healthz said ok and
    no metric named the missing source; the overlay's ConfigMap shipped memcg.release,
    which fails without a writable /proc/sys."""
    url, _ = api
    docs = manifests("kubernetes-unprivileged")
    assert 'use = "memcg.release"' not in "".join(docs["guardian-rules"]["data"].values())
    sc = docs["guardian"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["privileged"] is False and "SYS_PTRACE" in sc["capabilities"]["add"]
    with pod(image, tmp_path, url, tls[0], overlay="kubernetes-unprivileged",
             config_extra=INTERVAL_1H) as p:
        body = p.wait_healthz()
        assert body.startswith("degraded: ") and "kmsg" in body, body
        check = p.exec("/opt/guardian/bin/guardian", "check",
                       "--config=/etc/guardian/guardian.toml")
        assert check.returncode == 0, check.stdout + check.stderr
        _, metrics = p.http("/metrics")
        assert 'guardian_source_up{source="kmsg"} 0.0' in metrics, metrics[:2000]
        code = p.stop()
        assert code == 0, (code, p.logs())


def test_the_image_carries_what_the_manifests_use(image: str) -> None:
    """Before: lightkube absent from the image, so `[fleet]` and `kube.*` were config
    errors (exit 78, CrashLoopBackOff); and perf absent (issue 43), so evidence.profile
    fell back to /proc and the flight recorder never started."""
    out = podman("run", "--rm", "--network=none", *LIMITS, "--entrypoint=/opt/guardian/bin/python",
                 image, "-c", "import lightkube, httpx2; print('ok')", check=False)
    assert out.stdout.strip() == "ok", out.stderr
    info = json.loads(podman("image", "inspect", image).stdout)[0]
    assert info["Config"]["Entrypoint"] == ["/opt/guardian/bin/guardian"]
    # the license travels (before: nowhere in the image): LICENSE and the .deb's copyright
    lic = podman("run", "--rm", "--network=none", *LIMITS, "--entrypoint=/bin/cat", image,
                 "/usr/share/licenses/node-guardian/LICENSE",
                 "/usr/share/doc/node-guardian/copyright", check=False)
    assert lic.returncode == 0, lic.stderr
    assert lic.stdout.startswith((REPO / "LICENSE").read_text()), lic.stdout[:300]
    assert info["Config"]["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"
    # perf, for evidence.profile and the flight recorder (before: not in the image)
    perf = podman("run", "--rm", "--network=none", *LIMITS, "--entrypoint=/usr/bin/perf",
                  image, "--version", check=False)
    assert perf.returncode == 0 and perf.stdout.startswith("perf version "), \
        perf.stdout + perf.stderr
