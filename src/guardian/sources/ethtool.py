"""NIC driver statistics through the ETHTOOL_GSTATS ioctl (what ``ethtool -S`` prints),
with no ``ethtool`` binary. Statistics keep their driver names, so an ENA NIC exposes
``tx_timeout``, ``wd_expired``, ``pps_allowance_exceeded`` and the rest as they are:
counters in ``nic.stat``, and the few a driver reports as levels (:data:`GAUGES`) in
``nic.gauge``, so nothing takes a falling level for a counter reset.

The ioctl works in the network namespace guardian runs in; ``Host.root`` relocates only
the sysfs listing of interfaces.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.hostio.ethtool import (
    MAX_STATS,
    driver_info,
    ethtool_socket,
    list_interfaces,
    stat_names,
    stat_values,
)
from guardian.hostio.host import Host, is_dir
from guardian.plugin.contract import Source

# (the reply parsers are re-exported as they were: tests import them from here)

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
        if not is_dir(self.host.sys / "class" / "net"):
            return "no /sys/class/net"
        return None

    def interfaces(self) -> list[str]:
        found = list_interfaces(self.net_dir)
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
            self.sock = ethtool_socket()
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
