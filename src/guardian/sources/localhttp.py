"""Reading a local endpoint as guardian trusts it (the exposition source's pages, the probe
source's connects and GETs).

Bounded as a whole: every socket operation waits at most the time left to one deadline,
so a server that drips a byte at a time is cut when the deadline passes, never a
per-``recv`` timeout renewed by each byte (connect, TLS handshake, request, answer; the
answer is capped in bytes too).

Believed only from whom the kernel names: anyone may listen first on a free port, so a
connection to a peer on this host is used only when the socket that listens there (and the
one that accepted us) belongs to root, to guardian's own user or to a uid the
configuration names (``owner_uids``); else it is refused with why (:class:`NotOwned`), and
the caller gives no value, never a number the listener chose. See
:mod:`guardian.hostio.sockets` for how the kernel tells.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from guardian.core.errors import GuardianError
from guardian.hostio.sockets import tcp_peer_owner, unix_peer_uid


class NotOwned(GuardianError):
    """The endpoint's listener belongs to someone guardian does not believe."""


class Deadline:
    """One deadline for a whole exchange."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises TimeoutError once none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"not answered whole within {self.seconds:g} s")
        return left


def trusted_uids(owner_uids: Iterable[int] = ()) -> frozenset[int]:
    """Whose listeners are believed: root, guardian's own user, and ``owner_uids``."""
    return frozenset({0, os.geteuid(), *owner_uids})


def _who(uids: frozenset[int]) -> str:
    return "root" + "".join(f" or uid {u}" for u in sorted(uids - {0}))


def check_owner(sock: socket.socket, trusted: frozenset[int]) -> None:
    """Raise :class:`NotOwned` unless the peer of the connected ``sock`` (TCP on this host,
    or a unix socket) was made by a trusted uid; a TCP peer off this host passes (there
    is nobody to ask). Raises OSError when the kernel's tables cannot be read."""
    if sock.family == socket.AF_UNIX:
        uid = unix_peer_uid(sock)
        if uid not in trusted:
            raise NotOwned(f"the socket's listener is uid {uid}, not {_who(trusted)} "
                           "(owner_uids)")
        return
    owner = tcp_peer_owner(sock)
    if owner is None:
        return
    port = sock.getpeername()[1]
    if owner.listener_uid is None:
        raise NotOwned(f"nothing listens on port {port} any more: who answered cannot "
                       "be told")
    if owner.listener_uid not in trusted:
        raise NotOwned(f"the listener on port {port} is uid {owner.listener_uid}, not "
                       f"{_who(trusted)} (owner_uids)")
    if owner.uid is None:
        raise NotOwned(f"the socket that accepted us on port {port} is "
                       f"{owner.state or 'gone'}: who answered cannot be told")
    if owner.uid not in trusted:
        raise NotOwned(f"the socket that accepted us on port {port} is uid {owner.uid}, "
                       f"not {_who(trusted)} (owner_uids)")


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"tcp {text!r}: host:port expected")
    return host.strip("[]"), int(port)


def connect(host: str, port: int, deadline: Deadline, trusted: frozenset[int] | None
            ) -> socket.socket:
    """A TCP connection within the deadline, its peer checked (``trusted`` None: not
    checked). Raises OSError, TimeoutError or NotOwned."""
    sock = socket.create_connection((host, port), timeout=deadline.left())
    try:
        if trusted is not None:
            check_owner(sock, trusted)
    except BaseException:
        sock.close()
        raise
    return sock


def connect_unix(path: str, deadline: Deadline, trusted: frozenset[int] | None
                 ) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(deadline.left())
        sock.connect(path)
        if trusted is not None:
            check_owner(sock, trusted)
    except BaseException:
        sock.close()
        raise
    return sock


def get(url: str, deadline: Deadline, limit: int, *, headers: dict[str, str] | None = None,
        verify_tls: bool = True, trusted: frozenset[int] | None = None,
        over_limit: str = "cut") -> bytes:
    """One ``GET`` over HTTP/1.0 (no chunked answers, the connection closed by the server
    at the end), the raw answer (status line, head and body). At most ``limit`` bytes:
    ``over_limit`` "cut" keeps the first ``limit``, "error" raises ValueError. Raises
    OSError, TimeoutError (past the deadline), ssl.SSLError, NotOwned or ValueError."""
    try:
        answer = _get(url, deadline, limit, headers or {}, verify_tls, trusted)
    except TimeoutError:  # the socket's own, on the time left: say what was bounded
        raise TimeoutError(f"not answered whole within {deadline.seconds:g} s") from None
    if len(answer) > limit:
        if over_limit == "error":
            raise ValueError(f"larger than {limit} bytes")
        del answer[limit:]
    return bytes(answer)


def _get(url: str, deadline: Deadline, limit: int, headers: dict[str, str],
         verify_tls: bool, trusted: frozenset[int] | None) -> bytearray:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    sock = connect(host, port, deadline, trusted)
    try:
        if parts.scheme == "https":
            ctx = ssl.create_default_context()
            if not verify_tls:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            sock.settimeout(deadline.left())  # the handshake, whole, within it
            sock = ctx.wrap_socket(sock, server_hostname=host)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = {"Host": parts.netloc.rpartition("@")[2], "User-Agent": "guardian",
                "Accept": "*/*", "Connection": "close", **headers}
        request = f"GET {path} HTTP/1.0\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
        sock.settimeout(deadline.left())
        sock.sendall(request.encode("latin-1", "replace"))
        answer = bytearray()
        while len(answer) <= limit:
            sock.settimeout(deadline.left())  # what is left of the whole, every time
            chunk = sock.recv(min(1 << 16, limit + 1 - len(answer)))
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    return answer
