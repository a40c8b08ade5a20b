"""Who is at the other end of a local connection: the kernel says, not the peer.

Anyone may listen first on a free port: a user on 127.0.0.1:9400 (dcgm-exporter's) or on
kubelet's healthz port would be believed. For TCP the kernel lists every socket of this
network namespace in ``/proc/self/net/tcp`` and ``tcp6`` with the user that made it
(``uid``: net/ipv4/tcp_ipv4.c, ``get_tcp4_sock``, prints ``sock_i_uid(sk)``; an accepted
socket is a clone of its listener and keeps the listener's uid). After a connect, the
socket at the other end is the entry whose local address is our peer and whose remote
address is us; the listener is the LISTEN entry on the peer's port (on its address or a
wildcard one). For a unix socket, ``SO_PEERCRED`` gives the uid of whoever listened.

A peer that is not in this namespace's tables is not on this host (a remote address): there
is no owner to tell, and :func:`tcp_peer_owner` says so (``None``).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

TABLES = (Path("/proc/self/net/tcp"), Path("/proc/self/net/tcp6"))
# include/net/tcp_states.h
STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
          6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
          11: "CLOSING", 12: "NEW_SYN_RECV"}
LISTEN = 10
# the states in which the accepted socket is a full socket carrying its owner: a socket
# its owner closed may have become a time-wait mini socket, printed with uid 0
# (get_timewait4_sock), in state TIME_WAIT or FIN_WAIT2
OWNED = {1, 3, 8, 12}
Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


@dataclass(frozen=True)
class TcpSocket:
    """One line of /proc/net/tcp{,6}."""

    local: Address
    remote: Address
    state: int
    uid: int
    inode: int


@dataclass(frozen=True)
class PeerOwner:
    """Who made the socket at the other end of a connection, and its listener."""

    uid: int | None           # the accepted socket's (None: not found, or closed)
    state: str                # its TCP state ("" when not found)
    listener_uid: int | None  # the listening socket's on that port (None: none listens)


def _address(text: str) -> Address:
    """``0100007F:2352`` (IPv4) or 32 hex digits and a port (IPv6): the kernel prints the
    address as the 32-bit words it holds in network order, each read as a native
    integer, and the port in host order."""
    addr, _, port = text.partition(":")
    raw = b"".join(struct.pack("=I", int(addr[i:i + 8], 16)) for i in range(0, len(addr), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, int(port, 16)


def parse_tcp_table(text: str) -> list[TcpSocket]:
    """The sockets of a /proc/net/tcp or tcp6 text (the header line skipped; a line that
    does not parse is skipped too)."""
    out: list[TcpSocket] = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        try:
            out.append(TcpSocket(_address(f[1]), _address(f[2]), int(f[3], 16), int(f[7]),
                                 int(f[9])))
        except ValueError:
            continue
    return out


def tcp_sockets(tables: tuple[Path, ...] = TABLES) -> list[TcpSocket]:
    """Every TCP socket of this process's network namespace. Raises OSError."""
    out: list[TcpSocket] = []
    for path in tables:
        try:
            text = path.read_text()
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        out.extend(parse_tcp_table(text))
    return out


def _norm(addr: tuple[str, int] | tuple[str, int, int, int]) -> Address:
    ip = ipaddress.ip_address(addr[0].split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip, int(addr[1])


def tcp_peer_owner(sock: socket.socket, tables: tuple[Path, ...] = TABLES
                   ) -> PeerOwner | None:
    """Who made the socket at the other end of the connected TCP socket ``sock``, or None
    when the other end is not on this host. Raises OSError."""
    me, peer = _norm(sock.getsockname()), _norm(sock.getpeername())
    table = tcp_sockets(tables)
    theirs = next((s for s in table if s.local == peer and s.remote == me), None)
    wildcard = {ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::")}
    listeners = [s for s in table if s.state == LISTEN and s.local[1] == peer[1]
                 and s.local[0] in (peer[0], *wildcard)]
    # the kernel hands a connection to the most specific listener: the exact address
    listeners.sort(key=lambda s: s.local[0] in wildcard)
    if theirs is None and not listeners and not peer[0].is_loopback and peer[0] != me[0]:
        return None  # not in this namespace: a remote peer
    return PeerOwner(
        None if theirs is None or theirs.state not in OWNED else theirs.uid,
        STATES.get(theirs.state, str(theirs.state)) if theirs else "",
        listeners[0].uid if listeners else None)


def unix_peer_uid(sock: socket.socket) -> int:
    """The uid of whoever listens on the connected unix socket ``sock`` (SO_PEERCRED: the
    credentials it had when it listened). Raises OSError."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])
