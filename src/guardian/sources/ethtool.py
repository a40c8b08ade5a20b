"""NIC driver statistics through the ETHTOOL_GSTATS ioctl (what ``ethtool -S`` prints),
with no ``ethtool`` binary. Statistics keep their driver names, so an ENA NIC exposes
``tx_timeout``, ``wd_expired``, ``pps_allowance_exceeded`` and the rest as they are:
counters in ``nic.stat``, and the few a driver reports as levels (:data:`GAUGES`) in
``nic.gauge``, so nothing takes a falling level for a counter reset.

The ioctl works in the network namespace guardian runs in; ``Host.root`` relocates only
the sysfs listing of interfaces.
"""

from __future__ import annotations

import array
import fcntl
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.hostio.host import Host
from guardian.plugin.contract import Source

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
# Statistics that are levels, not counts, by driver. ENA: conntrack_allowance_available
# is "the number of tracked connections that can be established by the instance before
# hitting the Connections Tracked allowance" (amzn-drivers kernel/linux/ena/
# ENA_Linux_Best_Practices.rst; ena_ethtool.c ENA_METRIC_ENI_ENTRY, 2.8.0+).
GAUGES: dict[str, frozenset[str]] = {"ena": frozenset({"conntrack_allowance_available"})}


@dataclass(frozen=True)
class NicInfo:
    iface: str
    driver: str
    stat_names: tuple[str, ...]
    keys: tuple[Labels, ...] = field(init=False, repr=False, compare=False)
    gauges: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # each statistic's label set, made once per NIC (an ENA NIC has ~1,000)
        object.__setattr__(self, "keys", tuple(
            labels_of({"iface": self.iface, "driver": self.driver, "stat": n})
            for n in self.stat_names))
        levels = GAUGES.get(self.driver, frozenset())
        object.__setattr__(self, "gauges", tuple(
            i for i, n in enumerate(self.stat_names) if n in levels))


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


class EthtoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interfaces: list[str] | None = Field(
        None, description="interfaces to read (default: every one that answers)")


class EthtoolSource(Source[EthtoolConfig]):
    name: ClassVar[str] = "ethtool"
    Config = EthtoolConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("nic.stat", "NIC driver statistic (ethtool -S), by driver's name",
                   "count", labels=("iface", "driver", "stat"), counter=True),
        SignalSpec("nic.gauge", "NIC driver statistic that is a level, not a count "
                   "(e.g. ENA conntrack_allowance_available)", "count",
                   labels=("iface", "driver", "stat")),
        SignalSpec("nic.stats_available", "interfaces whose driver answers ETHTOOL_GSTATS",
                   "interfaces"),
    )

    def __init__(self, host: Host, config: EthtoolConfig | None = None) -> None:
        super().__init__(host, config)
        self.only = self.config.interfaces
        self.sock: socket.socket | None = None
        self.nics: dict[str, NicInfo | None] = {}  # None: answers no stats
        self.net_dir = str(host.sys / "class" / "net")

    def unavailable(self) -> str | None:
        if not (self.host.sys / "class" / "net").is_dir():
            return "no /sys/class/net"
        return None

    def interfaces(self) -> list[str]:
        found = sorted(os.listdir(self.net_dir))
        return [i for i in found if self.only is None or i in self.only]

    def _info(self, sock: socket.socket, iface: str) -> NicInfo | None:
        if iface not in self.nics:
            try:
                driver, n = driver_info(sock, iface)
                names = stat_names(sock, iface, n) if 0 < n <= MAX_STATS else ()
                self.nics[iface] = NicInfo(iface, driver, names) if names else None
            except OSError:
                self.nics[iface] = None  # no ethtool support (e.g. lo): remember, skip
        return self.nics[iface]

    def collect(self, now: float) -> dict[str, object]:
        if self.sock is None:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        fam: Family = {}
        levels: Family = {}
        present = self.interfaces()
        for gone in set(self.nics) - set(present):
            del self.nics[gone]
        answering = 0
        for iface in present:
            info = self._info(self.sock, iface)
            if info is None:
                continue
            try:
                _, n_now = driver_info(self.sock, iface)
                if n_now != len(info.stat_names):  # the driver's set changed: names again
                    self.nics.pop(iface, None)
                    continue
                values = stat_values(self.sock, iface, n_now)
            except (OSError, ValueError):
                self.nics.pop(iface, None)  # re-read names next time (device changed)
                continue
            answering += 1
            fam.update(zip(info.keys, map(float, values), strict=False))
            for i in info.gauges:
                levels[info.keys[i]] = fam.pop(info.keys[i])
        return {"nic.stat": fam, "nic.gauge": levels, "nic.stats_available": answering}

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
