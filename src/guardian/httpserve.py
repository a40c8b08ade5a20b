"""A small HTTP server for the metrics endpoint whose cost is bounded whatever clients do:
a fixed number of worker threads (started once), a socket timeout per connection, and a
connection that finds every worker busy closed at once instead of queued. A thread that
cannot be started (a task limit such as systemd's TasksMax) costs that request, never the
daemon."""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

log = logging.getLogger("guardian.httpserve")

WORKERS = 4
TIMEOUT = 5.0  # seconds a connection may sit idle or drip before it is dropped


class _Handler(WSGIRequestHandler):
    timeout = TIMEOUT  # socketserver.StreamRequestHandler applies it to the socket

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes are not log lines


class BoundedServer(WSGIServer):
    """``serve_forever`` in one thread hands each connection to one of ``workers`` threads;
    when all are busy the connection is closed (the scraper retries at its next interval)."""

    daemon_threads = True
    request_queue_size = 16

    def __init__(self, address: tuple[str, int], app: Callable[..., Any],
                 workers: int = WORKERS) -> None:
        self._jobs: queue.Queue[tuple[Any, Any] | None] = queue.Queue(maxsize=workers)
        self._workers: list[threading.Thread] = []
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

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._jobs.put_nowait((request, client_address))
        except queue.Full:
            self.shutdown_request(request)  # every worker busy: drop, never queue up

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            request, client_address = job
            try:
                self.finish_request(request, client_address)
            except Exception:  # a broken client must not take a worker away
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics endpoint: a request from %s failed", client_address)

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
