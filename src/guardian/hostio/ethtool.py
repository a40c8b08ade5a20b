"""The ETHTOOL ioctl (what ``ethtool -S`` asks the kernel, with no ``ethtool`` binary):
a NIC's driver, the names of its statistics and their values, and the interfaces sysfs
lists. The ioctl answers in the network namespace guardian runs in."""

from __future__ import annotations

import array
import fcntl
import os
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x03
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
_DRVINFO_SIZE = 4 + 32 * 5 + 12 + 5 * 4  # struct ethtool_drvinfo
_N_STATS_OFFSET = 4 + 32 * 5 + 12 + 4
MAX_STATS = 65536  # a driver claiming more is not believed
# The kernel writes as many entries as the driver has *now*, whatever size we announce;
# a count that grew between our GDRVINFO and the read would overrun an exact buffer.
_HEADROOM = 256


def ethtool_socket() -> socket.socket:
    """A socket to address the ioctls to (any socket of the namespace will do)."""
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def list_interfaces(net_dir: str) -> list[str]:
    """The interfaces under ``net_dir`` (``/sys/class/net``), sorted. Raises OSError."""
    return sorted(os.listdir(net_dir))


def _ioctl(sock: socket.socket, iface: str, buf: array.array[int]) -> None:
    addr, _ = buf.buffer_info()
    ifreq = struct.pack("16sP", iface.encode()[:15], addr)
    fcntl.ioctl(sock, SIOCETHTOOL, ifreq)


def driver_info(sock: socket.socket, iface: str) -> tuple[str, int]:
    """(driver name, number of statistics) of an interface."""
    buf = array.array("B", struct.pack("I", ETHTOOL_GDRVINFO) + bytes(_DRVINFO_SIZE - 4))
    _ioctl(sock, iface, buf)
    raw = buf.tobytes()
    driver = raw[4:36].split(b"\0", 1)[0].decode(errors="replace")
    (n_stats,) = struct.unpack_from("I", raw, _N_STATS_OFFSET)
    return driver, n_stats


def parse_gstrings(raw: bytes) -> tuple[str, ...]:
    """Names from a ``struct ethtool_gstrings`` reply (cmd, string_set, len, data)."""
    _, _, n = struct.unpack_from("III", raw)
    data = raw[12:12 + n * ETH_GSTRING_LEN]
    if len(data) < n * ETH_GSTRING_LEN:
        raise ValueError(f"ethtool strings reply truncated: {n} names announced")
    return tuple(data[i * ETH_GSTRING_LEN:(i + 1) * ETH_GSTRING_LEN].split(b"\0", 1)[0]
                 .decode(errors="replace").strip() for i in range(n))


def parse_gstats(raw: bytes) -> tuple[int, ...]:
    """Values from a ``struct ethtool_stats`` reply (cmd, n_stats, u64 data[])."""
    _, n = struct.unpack_from("II", raw)
    if len(raw) < 8 + 8 * n:
        raise ValueError(f"ethtool stats reply truncated: {n} values announced")
    return struct.unpack_from(f"{n}Q", raw, 8)


def stat_names(sock: socket.socket, iface: str, n: int) -> tuple[str, ...]:
    buf = array.array("B", struct.pack("III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n)
                      + bytes((n + _HEADROOM) * ETH_GSTRING_LEN))
    _ioctl(sock, iface, buf)
    return parse_gstrings(buf.tobytes())


def stat_values(sock: socket.socket, iface: str, n: int) -> tuple[int, ...]:
    buf = array.array("B", struct.pack("II", ETHTOOL_GSTATS, n) + bytes(8 * (n + _HEADROOM)))
    _ioctl(sock, iface, buf)
    return parse_gstats(buf.tobytes())
