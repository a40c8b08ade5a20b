"""Local endpoints and probes under hostile listeners (issue 39, round 4).

Whoever listened first on a port was believed: a user on 127.0.0.1:9400 (dcgm-exporter's)
fired the critical gpu-dcgm-fallen-off-bus, and an "ok" on kubelet's healthz port hid a
dead kubelet. Now the kernel is asked who made the listener (/proc/net/tcp's uid column)
and a listener of another user is refused: no value, with why. And one endpoint that
drips its answer held the one reader, and every other endpoint went stale behind it: each
read is now bounded as a whole and the endpoints are read at once. Real listeners on
loopback, one of them a child process running as nobody; every server stops by itself."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from guardian.core.snapshot import labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.probe import Probe, ProbeConfig, ProbeSource, run_probe
from tests.support.checkout import REPO
from tests.support.exposition import exposition_source
from tests.support.kernel import need_root

NOBODY = 65534
LIFETIME = 60.0  # seconds a server lives at most: it stops by itself
PAGE = (REPO / "tests" / "data" / "dcgm_exporter" / "xid79-fallen-off-bus.prom").read_bytes()


def _answer(body: bytes) -> bytes:
    return (b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def _serve_on(server: socket.socket, body: bytes, stop: threading.Event | None,
              requests: int = 50) -> None:
    """Answer up to ``requests`` GETs with ``body``, then stop (or when ``stop`` is set,
    or after LIFETIME)."""
    server.settimeout(0.2)
    waited = 0.0
    while requests and waited < LIFETIME and not (stop and stop.is_set()):
        try:
            conn, _ = server.accept()
        except TimeoutError:
            waited += 0.2
            continue
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                conn.sendall(_answer(body))
            except OSError:
                pass
        requests -= 1
    server.close()


@contextmanager
def listener_of(uid: int, body: bytes) -> Iterator[int]:
    """A loopback HTTP server whose listening socket ``uid`` made (a forked child that
    drops to it before it binds); yields its port."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(8)
            os.write(w, str(server.getsockname()[1]).encode())
            os.close(w)
            _serve_on(server, body, None)
        finally:
            os._exit(0)
    os.close(w)
    port = int(os.read(r, 16) or b"0")
    os.close(r)
    try:
        assert port, "the child could not listen"
        yield port
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


@contextmanager
def root_listener(body: bytes) -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()
    t = threading.Thread(target=_serve_on, args=(server, body, stop), daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        t.join(5)


def test_a_users_listener_on_an_endpoint_fires_nothing_and_says_why() -> None:
    need_root()
    engine = Engine(load_rules([REPO / "rules" / "gpu-dcgm.toml"]))
    with listener_of(NOBODY, PAGE) as port:
        src = exposition_source(endpoints={"dcgm": f"http://127.0.0.1:{port}/metrics"},
                                interval=3600)
        try:
            src.refresh()
            snap = Collector(Host(), [src]).collect(0.0)
            assert snap.get("prom.sample") is None
            engine.evaluate(snap)
            assert engine.firing() == []  # before: gpu-dcgm-fallen-off-bus, critical
            assert src.faults() == [f"dcgm: the listener on port {port} is uid "
                                    f"{NOBODY}, not root (owner_uids)"]
        finally:
            src.close()
        # a uid the configuration names is believed
        named = exposition_source(endpoints={"dcgm": f"http://127.0.0.1:{port}/metrics"},
                                  owner_uids={"dcgm": [NOBODY]}, interval=3600)
        try:
            named.refresh()
            assert named.collect(0.0)["prom.sample"], named.faults()
        finally:
            named.close()
    with root_listener(PAGE) as port:  # root's listener: read as before
        src = exposition_source(endpoints={"dcgm": f"http://127.0.0.1:{port}/metrics"},
                                interval=3600)
        try:
            src.refresh()
            engine.evaluate(Collector(Host(), [src]).collect(60.0))
            assert engine.firing() == ["gpu-dcgm-fallen-off-bus"]
        finally:
            src.close()


@pytest.mark.parametrize("kind", ["url", "tcp"])
def test_a_users_ok_on_a_probes_port_hides_nothing_and_says_why(kind: str) -> None:
    need_root()
    with listener_of(NOBODY, b"ok") as port:
        target = ({"url": f"http://127.0.0.1:{port}/healthz", "body": "^ok$"}
                  if kind == "url" else {"tcp": f"127.0.0.1:{port}"})
        result = run_probe(Probe.model_validate(target), 5.0)
        assert (result.up, result.reason) == (False, "owner")  # before: up
        assert result.detail == f"the listener on port {port} is uid {NOBODY}, not root " \
                                "(owner_uids)"
        src = ProbeSource(Host(), ProbeConfig.model_validate({"probes": {
            "kubelet": target}}))
        src.record("kubelet", result)
        out = src.collect(0.0)
        # neither up (hiding a dead kubelet) nor down (a listener's choice): no value
        assert out["probe.up"] is None
        assert src.faults() == [f"probe kubelet: {result.detail}"]
        assert out["probe.failures"] == {labels_of({"probe": "kubelet",
                                                    "reason": "owner"}): 1.0}
        named = Probe.model_validate({**target, "owner_uids": [NOBODY]})
        assert run_probe(named, 5.0).up
    with root_listener(b"ok") as port:
        target = ({"url": f"http://127.0.0.1:{port}/healthz", "body": "^ok$"}
                  if kind == "url" else {"tcp": f"127.0.0.1:{port}"})
        assert run_probe(Probe.model_validate(target), 5.0).up


@contextmanager
def dripping_endpoint() -> Iterator[tuple[int, threading.Event, list[int]]]:
    """A loopback endpoint that accepts and sends a head a byte every 0.1 s, never ending
    it; yields its port, its stop and how many answers it is dripping now."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()
    dripping = [0]

    def drip(conn: socket.socket) -> None:
        dripping[0] += 1
        with conn:
            for byte in (b"HTTP/1.0 200 OK\r\n" + b"X-Slow: " + b"a" * 5000):
                if stop.wait(0.1):
                    break
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    break
        dripping[0] -= 1

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()
        server.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], stop, dripping
    finally:
        stop.set()


def test_a_dripping_endpoint_is_cut_whole_and_never_stales_the_others() -> None:
    """Each byte comes well within the 1 s timeout: before, no read ever timed out and
    the round never ended; the endpoint named first held every other one's read."""
    with dripping_endpoint() as (drip_port, stop, dripping), root_listener(PAGE) as port:
        src = exposition_source(endpoints={
            "app": f"http://127.0.0.1:{drip_port}/metrics",
            "dcgm": f"http://127.0.0.1:{port}/metrics"}, timeout=1, interval=3600)
        try:
            done = threading.Event()

            def round_() -> None:
                src.refresh()
                done.set()

            threading.Thread(target=round_, daemon=True).start()
            # dcgm's page is in while app still drips: read beside it, not behind it
            seen = threading.Event()
            for _ in range(int(LIFETIME / 0.02)):
                if "dcgm" in src.readings:
                    seen.set()
                    break
                if done.wait(0.02):
                    break
            assert seen.is_set() and not src.readings["dcgm"].error
            assert dripping == [1]  # ...while app's answer was still coming
            assert done.wait(LIFETIME), "the round never ended: the drip was not cut"
            assert src.readings["app"].error.startswith(
                "TimeoutError: not answered whole within 1 s"), src.readings["app"]
            assert src.collect(0.0)["prom.up"] == {labels_of({"target": "dcgm"}): 1.0,
                                                   labels_of({"target": "app"}): 0.0}
        finally:
            src.close()
            stop.set()
