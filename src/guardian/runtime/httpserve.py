"""A small HTTP server for the metrics and health endpoints whose cost is bounded whatever
clients do.

One thread accepts connections and reads each request's head itself, without blocking
(a selector over every pending connection): a request must arrive whole within
``HEAD_DEADLINE`` seconds of its connection, and at most ``MAX_PENDING`` connections wait
at once (a new one pushes the oldest out). Only a complete request reaches one of a fixed
number of worker threads (started once); a request that finds every worker busy is
closed at once instead of queued. So a client that drips its headers (slowloris) holds a
slot of the reader's for two seconds, never a worker, and a probe that sends its request
in one go is answered while any number of such clients wait. A thread that cannot be
started (a task limit such as systemd's TasksMax) costs that request, never the daemon.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

log = logging.getLogger("guardian.httpserve")

WORKERS = 4
TIMEOUT = 5.0  # seconds a worker waits on a client that does not take the response
HEAD_DEADLINE = 2.0  # seconds from connecting to the end of the request's headers
MAX_PENDING = 64  # connections whose request head is still arriving
MAX_HEAD = 16384  # bytes of request line and headers


@dataclass
class _Request:
    """An accepted connection and the request head read from it."""

    sock: socket.socket
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:  # the head was read already: serve it from memory
        req: _Request = self.request
        self.connection = req.sock
        self.connection.settimeout(TIMEOUT)
        self.rfile = io.BytesIO(bytes(req.head))
        self.wfile = socketserver._SocketWriter(self.connection)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not log lines


class BoundedServer(WSGIServer):
    """Requests read whole by one thread (:meth:`serve_forever`), then handed to one of
    ``workers`` threads; when all are busy the connection is closed (the scraper retries
    at its next interval)."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: Callable[..., Any],
                 workers: int = WORKERS) -> None:
        self._jobs: queue.Queue[_Request | None] = queue.Queue(maxsize=workers)
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)  # binds (OSError when the port is in use)
        self.set_app(app)
        for i in range(workers):
            t = threading.Thread(target=self._work, name=f"guardian-metrics-{i}", daemon=True)
            try:
                t.start()
            except RuntimeError as exc:  # fewer workers, still serving
                log.warning("metrics endpoint: worker %d not started: %s", i, exc)
                continue
            self._workers.append(t)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accept, read request heads within their deadline, hand complete ones on."""
        pending: dict[socket.socket, _Request] = {}
        with selectors.DefaultSelector() as sel:
            sel.register(self.socket, selectors.EVENT_READ)
            try:
                while not self._stop.is_set():
                    now = time.monotonic()
                    wait = min((r.deadline for r in pending.values()), default=now + 0.5)
                    for key, _ in sel.select(max(min(wait - now, poll_interval), 0.0)):
                        if key.fileobj is self.socket:
                            self._accept(sel, pending)
                        else:
                            self._read(sel, pending, pending[key.fileobj])  # type: ignore[index]
                    now = time.monotonic()
                    for late in [r for r in pending.values() if r.deadline <= now]:
                        self._drop(sel, pending, late)
            finally:
                for r in list(pending.values()):
                    self._drop(sel, pending, r)
                self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector, pending: dict[socket.socket, _Request]
                ) -> None:
        try:
            sock, _ = self.socket.accept()
        except OSError:
            return
        if len(pending) >= MAX_PENDING:  # the oldest waiter makes room: a probe gets in
            self._drop(sel, pending, min(pending.values(), key=lambda r: r.deadline))
        sock.setblocking(False)
        req = _Request(sock, time.monotonic() + HEAD_DEADLINE)
        pending[sock] = req
        sel.register(sock, selectors.EVENT_READ)

    def _read(self, sel: selectors.BaseSelector, pending: dict[socket.socket, _Request],
              req: _Request) -> None:
        try:
            chunk = req.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        req.head += chunk
        if not chunk or len(req.head) > MAX_HEAD:
            self._drop(sel, pending, req)
        elif b"\r\n\r\n" in req.head or b"\n\n" in req.head:
            sel.unregister(req.sock)
            del pending[req.sock]
            req.sock.setblocking(True)
            try:
                self._jobs.put_nowait(req)
            except queue.Full:
                self._close(req)  # every worker busy: drop, never queue up

    def _drop(self, sel: selectors.BaseSelector, pending: dict[socket.socket, _Request],
              req: _Request) -> None:
        sel.unregister(req.sock)
        del pending[req.sock]
        self._close(req)

    @staticmethod
    def _close(req: _Request) -> None:
        with contextlib.suppress(OSError):
            req.sock.close()

    def _work(self) -> None:
        while (req := self._jobs.get()) is not None:
            try:
                self.finish_request(req, req.sock.getpeername())  # type: ignore[arg-type]
            except Exception:  # a broken client must not take a worker away
                log.debug("metrics endpoint: a request failed", exc_info=True)
            finally:
                with contextlib.suppress(OSError):
                    req.sock.shutdown(socket.SHUT_WR)
                self._close(req)

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            try:
                self._jobs.put_nowait(None)
            except queue.Full:
                break


def serve(address: str, port: int, app: Callable[..., Any]) -> BoundedServer:
    """Listen on ``address:port`` and serve ``app`` from a thread. Raises OSError."""
    server = BoundedServer((address, port), app)
    thread = threading.Thread(target=server.serve_forever, name="guardian-metrics",
                              daemon=True)
    thread.start()
    return server
