"""Issue 33: health probes (HTTP, TCP, unix socket) against real local servers, each
bounded by its timeout whatever the server does, never on the loop's thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.probe import Probe, ProbeConfig, ProbeSource, run_probe
from tests.support.wait import ends, wait_until


class Handler(BaseHTTPRequestHandler):
    stop = threading.Event()
    asked: ClassVar[set[str]] = set()

    def do_GET(self) -> None:
        self.asked.add(self.path)
        if self.path == "/healthz":  # kubelet's answer (pkg/kubelet/server: "ok")
            self._send(200, b"ok")
        elif self.path == "/sick":
            self._send(500, b"internal error")
        elif self.path == "/wrong-body":
            self._send(200, b"degraded")
        elif self.path == "/slow":  # accepts, reads the request, never answers
            self.stop.wait()
        elif self.path == "/drip":  # one byte every 0.2 s, never ending
            self.send_response(200)
            self.end_headers()
            while not self.stop.wait(0.2):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http() -> Iterator[str]:
    Handler.stop.clear()
    Handler.asked.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    Handler.stop.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[tuple[int, str, int]]:
    """A listening TCP port, a listening unix socket, and a closed TCP port."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    unix = socket.socket(socket.AF_UNIX)
    path = str(tmp_path / "containerd.sock")
    unix.bind(path)
    unix.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    yield tcp.getsockname()[1], path, closed.getsockname()[1]
    for s in (tcp, unix, closed):
        s.close()


def probe(**kw: Any) -> Probe:
    return Probe.model_validate(kw)


def test_http_status_body_and_latency(http: str) -> None:
    ok = run_probe(probe(url=f"{http}/healthz", body="^ok$"), 2.0)
    assert (ok.up, ok.status, ok.reason) == (True, 200, "")
    assert 0 < ok.seconds <= 2.0  # within its timeout
    sick = run_probe(probe(url=f"{http}/sick"), 2.0)
    assert (sick.up, sick.status, sick.reason) == (False, 500, "status")
    assert run_probe(probe(url=f"{http}/sick", status=[500]), 2.0).up
    wrong = run_probe(probe(url=f"{http}/wrong-body", body="^ok$"), 2.0)
    assert (wrong.up, wrong.reason) == (False, "body")


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_a_server_that_never_finishes_is_cut_at_the_timeout(http: str, path: str) -> None:
    """The server never ends its answer (while the test lasts): the probe ends at all only
    because it is cut at its timeout."""
    r = ends(lambda: run_probe(probe(url=f"{http}{path}"), 0.8), f"a probe of {path}")
    assert (r.up, r.reason) == (False, "timeout")


def test_https_with_and_without_verification(tmp_path: Path) -> None:
    """A TLS server with a self-signed certificate: refused (tls) while verified, up with
    verify_tls = false; the request is the same GET."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/healthz"
        refused = run_probe(probe(url=url), 2.0)
        assert (refused.up, refused.reason) == (False, "tls")
        ok = run_probe(probe(url=url, verify_tls=False, body="^ok$"), 2.0)
        assert (ok.up, ok.status) == (True, 200)
    finally:
        server.shutdown()
        server.server_close()


def test_tcp_and_unix_connect(listeners: tuple[int, str, int], tmp_path: Path) -> None:
    port, path, closed = listeners
    assert run_probe(probe(tcp=f"127.0.0.1:{port}"), 1.0).up
    assert run_probe(probe(unix=path), 1.0).up
    refused = run_probe(probe(tcp=f"127.0.0.1:{closed}"), 1.0)
    assert (refused.up, refused.reason) == (False, "refused")
    gone = run_probe(probe(unix=str(tmp_path / "none.sock")), 1.0)
    assert (gone.up, gone.reason) == (False, "error")


def test_the_source_never_blocks_the_loop(http: str, listeners: tuple[int, str, int]) -> None:
    port, path, _ = listeners
    cfg = ProbeConfig.model_validate({"timeout": "1s", "interval": "0.2s", "probes": {
        "kubelet": {"url": f"{http}/healthz", "body": "ok"},
        "slow": {"url": f"{http}/slow"},
        "drip": {"url": f"{http}/drip"},
        "containerd": {"unix": path},
        "port": {"tcp": f"127.0.0.1:{port}"},
    }})
    src = ProbeSource(Host(Path("/")), cfg)
    woken: list[str] = []
    slow_failed = labels_of({"probe": "slow", "reason": "timeout"})

    def all_answered() -> dict[str, Any] | None:
        out = src.collect(0.0)
        failures = out["probe.failures"]
        assert isinstance(failures, dict)
        return out if out["probe.up"] and slow_failed in failures else None

    try:
        assert src.follow(woken.append)
        out = wait_until(all_answered, "every probe answered or cut, the slow one too")
    finally:
        src.close()

    def key(n: str) -> tuple[tuple[str, str], ...]:
        return labels_of({"probe": n})

    assert out["probe.up"] == {key("kubelet"): 1.0, key("slow"): 0.0, key("drip"): 0.0,
                               key("containerd"): 1.0, key("port"): 1.0}
    assert out["probe.status_code"][key("kubelet")] == 200
    assert set(out["probe.latency_seconds"]) == {key("kubelet"), key("containerd"),
                                                 key("port")}
    assert out["probe.failures"][labels_of({"probe": "slow", "reason": "timeout"})] >= 1
    assert sorted(set(woken)) == ["probe containerd", "probe drip", "probe kubelet",
                                  "probe port", "probe slow"]


def test_a_collection_never_waits_on_a_probe_in_flight(http: str) -> None:
    """A probe of a server that holds its answer for as long as the test lasts, with an
    hour's timeout: a collection returns while it is in flight, and says it has no
    answer yet (no value, never "down")."""
    src = ProbeSource(Host(Path("/")), ProbeConfig.model_validate(
        {"probes": {"held": {"url": f"{http}/slow", "timeout": "1h"}}}))
    try:
        src.follow(lambda _: None)
        wait_until(lambda: "/slow" in Handler.asked, "the probe's request at the server")
        out = ends(lambda: src.collect(0.0), "a collection while the probe is in flight")
        assert out["probe.up"] is None and out["probe.failures"] == {}
    finally:
        Handler.stop.set()  # the server lets go: the probe ends, and close() with it
        src.close()


def test_a_probe_names_exactly_one_target() -> None:
    for bad in ({}, {"tcp": "h:1", "unix": "/x"}, {"url": "ftp://x/"}, {"tcp": "nohost"},
                {"tcp": "h:1", "status": [200]}, {"url": "http://h/", "body": "(a+)+$"},
                {"url": "http://h/a b"}, {"url": "http://h/", "headers": {"X": "1\r\nY: 2"}},
                {"url": "http://h/", "headers": {"X Y": "1"}}):
        with pytest.raises(ValidationError):
            Probe.model_validate(bad)


def test_a_probe_and_a_check_feed_the_shipped_rules(http: str, tmp_path: Path) -> None:
    """kubelet's /healthz answering 500 and a check saying NonOK, read for real, fire
    rules/health.toml's kubelet-unhealthy (after its 2 minutes) and script-check-problem."""
    from guardian.core.snapshot import Snapshot
    from guardian.engine.engine import Engine
    from guardian.policy.loader import load_rules
    from guardian.sources.script import ScriptConfig, ScriptSource
    from tests.support.checkout import RULES

    probes = ProbeSource(Host(Path("/")), ProbeConfig.model_validate(
        {"probes": {"kubelet": {"url": f"{http}/sick", "body": "^ok$"}}}))
    checks = ScriptSource(Host(Path("/")), ScriptConfig.model_validate(
        {"checks": {"ntp": {"argv": ["/bin/sh", "-c", "echo ntp is down; exit 1"]}}}))
    def both() -> dict[str, object] | None:
        values = {**probes.collect(0.0), **checks.collect(0.0)}
        return values if values["probe.up"] and values["script.problem"] else None

    try:
        values = wait_until(both, "the probe's and the check's first answers")
    finally:
        probes.close()
        checks.close()
    engine = Engine(load_rules([RULES / "health.toml"]))
    firing: dict[str, float] = {}
    for t in range(0, 181, 15):
        snap = Snapshot.build(float(t), values, (*probes.specs, *checks.specs))
        for d in engine.evaluate(snap):
            if d.kind == "firing":
                firing[d.rule] = t
    assert firing == {"script-check-problem": 0, "health-probe-down": 60,
                      "kubelet-unhealthy": 120}
