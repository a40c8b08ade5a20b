"""The metrics endpoint under hostile clients: idle connections and clients that drip a
request head a byte at a time. The daemon as a process, on loopback."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon import daemon, free_port, threads_of
from tests.support.wait import wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def test_idle_metrics_connections_do_not_grow_the_daemon(tmp_path: Path) -> None:
    """Before: a thread per connection, with no timeout: idle connections grew the thread
    count without bound. Loopback only."""
    port = free_port()
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        before = threads_of(proc.pid)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
        try:
            time.sleep(1.0)
            assert threads_of(proc.pid) <= before  # the workers were started already
            notify.wait_for("WATCHDOG", timeout=3)
        finally:
            for s in idle:
                s.close()
        def metrics() -> str | None:  # once the idle ones are dropped after their timeout
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=2) as resp:
                    return bytes(resp.read()).decode()
            except OSError:
                return None

        body = wait_until(metrics, "/metrics answered again", every=0.5)
        assert "guardian_rule_state" in body and proc.poll() is None


def test_slow_clients_never_keep_a_probe_from_healthz(tmp_path: Path) -> None:
    """Before: eight connections sending one header byte every 2 s held every worker and
    the queue: 16 of 16 health probes failed while the loop was healthy (in the DaemonSet
    any pod reaches the node's address, and a failing liveness probe restarts guardian).
    Now a request's head must arrive within 2 s and only whole requests reach a worker:
    64 dripping clients (more than the pending slots), and every probe is answered."""
    port = free_port()
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        drips: list[socket.socket] = []
        answered = failed = 0
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < 8:
                while len(drips) < 64:  # reconnect as they are dropped
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(b"GET /healthz HTTP/1.1\r\n")
                    drips.append(s)
                for s in list(drips):
                    try:
                        s.sendall(b"X")  # one byte at a time, never the blank line
                    except OSError:
                        drips.remove(s)
                        s.close()
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                    answered += 1
                except OSError:
                    failed += 1
                time.sleep(0.2)
        finally:
            for s in drips:
                s.close()
        assert failed == 0 and answered >= 10, (answered, failed)
        assert proc.poll() is None
