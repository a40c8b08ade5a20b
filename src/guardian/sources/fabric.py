"""RDMA fabric ports (InfiniBand, RoCE, AWS EFA) from ``/sys/class/infiniband``, read
through :mod:`guardian.hostio.infiniband`: each port's state, physical state, rate, link
layer and network interface, its IBTA PortCounters (``counters/``: one signal per counter
the kernel declares, ``fabric.port.link_downed``...), its driver's counters
(``hw_counters/``) and the device-wide driver counters (EFA's ``no_completion_cmds``).

A PortCounters counter that stands at its ceiling (IBTA stops it there; 4 to 32 bits
wide) counts nothing more: it has no value (its member is left out, so no ``rate`` or
``increase`` reads a false zero over it) and ``fabric.port.saturated`` says which.
A file that cannot be read (``N/A (no PMA)``, an error from the device) has no value,
never 0.

Which RDMA devices the node should have comes from its PCI bus (read through
:mod:`guardian.hostio.pci` with the layout, not every tick): every InfiniBand controller
(class 0x0207) and EFA function must have one (:func:`~guardian.hostio.infiniband.
needs_rdma`); one that has none (no driver bound, its driver bound without one, or gone
from the bus since) is ``fabric.devices.missing`` and a fault of the source. ``expect =
N`` says how many the node has where the bus cannot (ConnectX Ethernet functions for
RoCE, devices gone before guardian started). With ``devices = "auto"`` (the default) a
node with no such function and no device in /sys/class/infiniband has nothing for the
source to read: it is not configured, and the rules over it are blind by choice, named,
never counted healthy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.hostio.host import Host, is_dir
from guardian.hostio.infiniband import (
    PMA_WIDTHS,
    Device,
    infiniband_dir,
    list_devices,
    needs_rdma,
    parse_counter,
    parse_rate,
    parse_state,
    pci_address,
    read_raw,
    saturated,
    scan_device,
)
from guardian.hostio.pci import PciFunction, functions
from guardian.plugin.contract import Source

#: The port states the kernel names (state_show): 4 ACTIVE and 5 ACTIVE_DEFER pass traffic.
ACTIVE_STATES = frozenset({4, 5})
#: phys_state_show's 5: LinkUp.
LINK_UP = 5
#: How often the devices' layout (ports, counter files, network interfaces) is read
#: again while the list of devices stays the same (seconds of the collections' clock).
RESCAN_SECONDS = 300.0

# IBTA PortCounters (and PortCountersExtended), as the kernel names their files; the
# signal is fabric.port.<name in lower case>. Units and meanings from the IBTA
# specification's PortCounters attribute, as perfquery(8) prints them.
_PMA_HELP: dict[str, tuple[str, str]] = {
    "symbol_error": ("errors", "minor link errors detected on the port's physical lanes "
                     "(SymbolErrorCounter)"),
    "link_error_recovery": ("events", "times the link error recovery process completed "
                            "(LinkErrorRecoveryCounter)"),
    "link_downed": ("events", "times the link error recovery process failed and the link "
                    "went down (LinkDownedCounter)"),
    "port_rcv_errors": ("packets", "packets received with errors (PortRcvErrors)"),
    "port_rcv_remote_physical_errors": ("packets", "packets received marked bad upstream "
                                        "(PortRcvRemotePhysicalErrors)"),
    "port_rcv_switch_relay_errors": ("packets", "packets the switch relay could not "
                                     "forward (PortRcvSwitchRelayErrors)"),
    "port_xmit_discards": ("packets", "outbound packets discarded, the port down or "
                           "congested (PortXmitDiscards)"),
    "port_xmit_constraint_errors": ("packets", "outbound packets dropped by partition or "
                                    "raw filtering (PortXmitConstraintErrors)"),
    "port_rcv_constraint_errors": ("packets", "inbound packets dropped by partition or raw "
                                   "filtering (PortRcvConstraintErrors)"),
    "local_link_integrity_errors": ("events", "times the local physical errors exceeded "
                                    "the LocalPhyErrors threshold (LocalLinkIntegrityErrors)"),
    "excessive_buffer_overrun_errors": ("events", "times OverrunErrors consecutive "
                                        "flow-control update periods each had a buffer "
                                        "overrun (ExcessiveBufferOverrunErrors)"),
    "VL15_dropped": ("packets", "subnet management packets dropped for lack of buffers "
                     "(VL15Dropped)"),
    "port_xmit_data": ("words", "data transmitted, in 4-octet words (PortXmitData)"),
    "port_rcv_data": ("words", "data received, in 4-octet words (PortRcvData)"),
    "port_xmit_packets": ("packets", "packets transmitted (PortXmitPkts)"),
    "port_rcv_packets": ("packets", "packets received (PortRcvPkts)"),
    "port_xmit_wait": ("ticks", "ticks with data to send but none sent (PortXmitWait)"),
    "unicast_xmit_packets": ("packets", "unicast packets transmitted "
                             "(PortUnicastXmitPkts)"),
    "unicast_rcv_packets": ("packets", "unicast packets received (PortUnicastRcvPkts)"),
    "multicast_xmit_packets": ("packets", "multicast packets transmitted "
                               "(PortMulticastXmitPkts)"),
    "multicast_rcv_packets": ("packets", "multicast packets received "
                              "(PortMulticastRcvPkts)"),
}
assert set(_PMA_HELP) == set(PMA_WIDTHS)


def pma_signal(name: str) -> str:
    """The signal of PortCounters file ``name`` (``VL15_dropped`` ->
    ``fabric.port.vl15_dropped``)."""
    return f"fabric.port.{name.lower()}"


def _width(name: str) -> str:
    w = PMA_WIDTHS[name]
    return f"{w} bits" if w else "32 bits, or 64 with extended counters"


_PORT = ("device", "port")
_MISSING = ("pci", "pci_id", "driver", "state")
#: What ``state`` of fabric.devices.missing says, in words for the source's fault.
MISSING_STATES = {"unbound": "no driver bound", "no_rdma": "its driver bound, no RDMA device",
                  "off_bus": "gone from the PCI bus"}


class FabricConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    devices: Literal["auto", "expected"] = Field(
        "auto", description="auto: read where the PCI bus has an InfiniBand controller "
        "(class 0x0207) or an EFA function, or /sys/class/infiniband has a device "
        "(elsewhere the source has nothing to read); expected: this node has RDMA "
        "devices, so having none is a fault")
    expect: int | None = Field(
        None, ge=1, description="the RDMA devices this node has (a p5.48xlarge: 32 EFA): "
        "fewer in /sys/class/infiniband is a fault, and fabric.devices.expected at least "
        "this")


def _missing_fault(fn: PciFunction, state: str) -> str:
    driver = f", driver {fn.driver}" if fn.driver else ""
    return (f"PCI {fn.address} ({fn.pci_id}{driver}): no RDMA device in "
            f"/sys/class/infiniband ({MISSING_STATES[state]})")


@dataclass(frozen=True)
class _PortPlan:
    """What to read of one port, with each member's labels made once."""

    key: Labels
    path: str
    info: Labels | None  # fabric.port.info's member: link layer and netdev (None: unread)
    pma: tuple[tuple[str, str, str, Labels], ...]  # (file, name, signal, saturated key)
    other: tuple[tuple[str, Labels], ...]  # counters/ files the kernel table lacks
    hw: tuple[tuple[str, Labels], ...]


def _plan(dev: Device) -> tuple[list[_PortPlan], list[tuple[str, Labels]]]:
    ports = []
    for p in dev.ports:
        key = labels_of({"device": p.device, "port": p.port})
        counters = f"{p.path}/counters"
        ports.append(_PortPlan(
            key, p.path,
            None if p.link_layer is None else labels_of(
                {"device": p.device, "port": p.port, "link_layer": p.link_layer,
                 "netdev": p.netdev}),
            tuple((f"{counters}/{n}", n, pma_signal(n),
                   labels_of({"device": p.device, "port": p.port, "counter": n}))
                  for n in p.counters if n in PMA_WIDTHS),
            tuple((f"{counters}/{n}",
                   labels_of({"device": p.device, "port": p.port, "counter": n}))
                  for n in p.counters if n not in PMA_WIDTHS),
            tuple((f"{p.path}/hw_counters/{n}",
                   labels_of({"device": p.device, "port": p.port, "counter": n}))
                  for n in p.hw_counters)))
    device_hw = [(f"{dev.path}/hw_counters/{n}", labels_of({"device": dev.name, "counter": n}))
                 for n in dev.hw_counters]
    return ports, device_hw


class FabricSource(Source[FabricConfig]):
    """Ports of the host's RDMA devices and their counters, and the devices the node
    should have."""

    name: ClassVar[str] = "fabric"
    Config = FabricConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("fabric.devices", "RDMA devices in /sys/class/infiniband", "devices"),
        SignalSpec("fabric.devices.expected", "RDMA devices this node should have at least: "
                   "the larger of expect and the PCI functions that must have one "
                   "(InfiniBand controllers, EFA; one gone from the bus since start still "
                   "counts); 1 with devices = \"expected\"", "devices"),
        SignalSpec("fabric.devices.missing", "1 for a PCI function that must have an RDMA "
                   "device and has none, by address, vendor:device, bound driver (\"\" for "
                   "none) and state (unbound: no driver bound; no_rdma: its driver bound "
                   "without one; off_bus: gone from the PCI bus since it was seen)",
                   labels=_MISSING),
        SignalSpec("fabric.port.state", "the port's logical state as the kernel numbers it "
                   "(1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)", labels=_PORT),
        SignalSpec("fabric.port.phys_state", "the port's physical state (1 Sleep, 2 "
                   "Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 "
                   "LinkErrorRecovery, 7 Phy Test)", labels=_PORT),
        SignalSpec("fabric.port.active", "1 when the port's state is ACTIVE (4) or "
                   "ACTIVE_DEFER (5), else 0", labels=_PORT),
        SignalSpec("fabric.port.link_up", "1 when the port's physical state is LinkUp (5), "
                   "else 0", labels=_PORT),
        SignalSpec("fabric.port.rate_gbps", "the port's rate as its rate file says it: lanes "
                   "times the kernel's per-lane speed (the signalling rate for SDR to QDR, "
                   "the nominal rate from FDR on)", "Gb/s", labels=_PORT),
        SignalSpec("fabric.port.info", "always 1: the port's link layer (InfiniBand, "
                   "Ethernet for RoCE, Unknown for EFA) and network interface (empty where "
                   "it has none or it cannot be told) as labels",
                   labels=("device", "port", "link_layer", "netdev")),
        *(SignalSpec(pma_signal(n), f"{text}; IBTA PortCounters, {_width(n)}, no value at "
                     "its ceiling (fabric.port.saturated)", unit, labels=_PORT, counter=True)
          for n, (unit, text) in _PMA_HELP.items()),
        SignalSpec("fabric.port.counter", "a file of the port's counters/ directory that "
                   "the kernel's PortCounters table does not name (a vendor kernel's), by "
                   "its name", "count", labels=("device", "port", "counter"), counter=True),
        SignalSpec("fabric.port.saturated", "1 when a PortCounters counter stands at its "
                   "ceiling (IBTA stops it there: it counts nothing more until reset, and "
                   "has no value), else 0", labels=("device", "port", "counter")),
        SignalSpec("fabric.port.hw_counter", "a driver counter of the port (hw_counters/: "
                   "mlx5's out_of_buffer, EFA's rdma_read_wr_err...), by the driver's name",
                   "count", labels=("device", "port", "counter"), counter=True),
        SignalSpec("fabric.device.hw_counter", "a device-wide driver counter (the device's "
                   "hw_counters/: EFA's no_completion_cmds...), by the driver's name",
                   "count", labels=("device", "counter"), counter=True),
    )

    def __init__(self, host: Host, config: FabricConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: FabricConfig = self.config
        self.class_dir = infiniband_dir(host.sys)
        # PCI functions that must have an RDMA device, each kept (by address) once seen on
        # the bus: one that leaves the bus is missing, not forgotten
        self.tracked: dict[str, PciFunction] = {}
        self.on_bus: dict[str, PciFunction] = {}  # the tracked ones on the bus now
        self.backed: set[str] = set()  # PCI addresses of the devices listed now
        self.names: list[str] = []
        self.ports: list[_PortPlan] = []
        self.device_hw: list[tuple[str, Labels]] = []
        self.scanned: float | None = None
        self._faults: list[str] = []

    def unconfigured(self) -> str | None:
        if self.cfg.devices != "auto" or self.cfg.expect is not None or \
                not is_dir(self.host.sys / "class"):
            return None  # (without sysfs the source is unavailable, not unconfigured)
        if list_devices(self.class_dir) or any(needs_rdma(f) for f in functions(self.host.sys)):
            return None
        return ('devices = "auto" and no RDMA device on this node: none in '
                "/sys/class/infiniband, and no InfiniBand controller (PCI class 0x0207) or "
                "EFA (vendor 0x1d0f) on its PCI bus")

    def unavailable(self) -> str | None:
        if not is_dir(self.host.sys / "class"):
            return f"no {self.host.sys / 'class'} (sysfs not mounted)"
        return None

    def _scan(self, names: list[str], now: float) -> None:
        ports: list[_PortPlan] = []
        device_hw: list[tuple[str, Labels]] = []
        for name in names:
            try:
                dev = scan_device(self.class_dir, name)
            except OSError:
                continue  # going away as we look: not listed next time
            p, d = _plan(dev)
            ports += p
            device_hw += d
        self.names, self.ports, self.device_hw, self.scanned = names, ports, device_hw, now
        self.backed = {a for a in (pci_address(self.class_dir, n) for n in names) if a}
        bus = {f.address: f for f in functions(self.host.sys)}
        for address, fn in bus.items():
            if needs_rdma(fn):
                self.tracked[address] = fn
            elif address in self.tracked:  # handed to a guest since: its device is there
                del self.tracked[address]
        self.on_bus = {a: bus[a] for a in self.tracked if a in bus}

    def _devices(self, faults: list[str]) -> dict[str, object]:
        """The devices present, expected and missing, with a fault for each missing."""
        missing: Family = {}
        for address, fn in sorted(self.tracked.items()):
            if address in self.backed:
                continue
            now = self.on_bus.get(address)
            state = "off_bus" if now is None else "unbound" if not now.driver else "no_rdma"
            fn = now or fn
            missing[labels_of({"pci": address, "pci_id": fn.pci_id,
                               "driver": now.driver if now else "", "state": state})] = 1.0
            faults.append(_missing_fault(fn, state))
        expected = max(self.cfg.expect or 0, len(self.tracked),
                       1 if self.cfg.devices == "expected" else 0)
        if len(self.names) < expected and not missing:
            faults.append(f"{len(self.names)} RDMA device(s) in /sys/class/infiniband, "
                          f"{expected} expected" + (f" (expect = {self.cfg.expect})"
                                                    if self.cfg.expect else ""))
        return {"fabric.devices": float(len(self.names)),
                "fabric.devices.expected": float(expected),
                "fabric.devices.missing": missing}

    def collect(self, now: float) -> dict[str, object]:
        names = list_devices(self.class_dir)
        if names != self.names or self.scanned is None or \
                not 0 <= now - self.scanned < RESCAN_SECONDS:
            self._scan(names, now)
        state: Family = {}
        phys: Family = {}
        active: Family = {}
        link_up: Family = {}
        rate: Family = {}
        info: Family = {}
        pma: dict[str, Family] = {pma_signal(n): {} for n in PMA_WIDTHS}
        other: Family = {}
        pegged: Family = {}
        hw: Family = {}
        faults: list[str] = []
        for port in self.ports:
            key, path = port.key, port.path
            s = parse_state(read_raw(path + "/state"))
            ps = parse_state(read_raw(path + "/phys_state"))
            r = parse_rate(read_raw(path + "/rate"))
            if s is None or ps is None or r is None:
                what = [w for w, v in (("state", s), ("phys_state", ps), ("rate", r))
                        if v is None]
                faults.append(f"{path}: cannot read {', '.join(what)}")
                self.scanned = None  # the layout may have changed: look again next time
            if s is not None:
                state[key] = float(s)
                active[key] = 1.0 if s in ACTIVE_STATES else 0.0
            if ps is not None:
                phys[key] = float(ps)
                link_up[key] = 1.0 if ps == LINK_UP else 0.0
            if r is not None:
                rate[key] = r
            if port.info is not None:
                info[port.info] = 1.0
            for file, name, signal, ckey in port.pma:
                v = parse_counter(read_raw(file))
                if v is None:
                    continue
                if saturated(name, v):
                    pegged[ckey] = 1.0
                else:
                    pegged[ckey] = 0.0
                    pma[signal][key] = float(v)
            for file, ckey in port.other:
                if (v := parse_counter(read_raw(file))) is not None:
                    other[ckey] = float(v)
            for file, ckey in port.hw:
                if (v := parse_counter(read_raw(file))) is not None:
                    hw[ckey] = float(v)
        device_hw: Family = {}
        for file, ckey in self.device_hw:
            if (v := parse_counter(read_raw(file))) is not None:
                device_hw[ckey] = float(v)
        devices = self._devices(faults)
        self._faults = faults
        return {**devices, "fabric.port.state": state, "fabric.port.phys_state": phys,
                "fabric.port.active": active, "fabric.port.link_up": link_up,
                "fabric.port.rate_gbps": rate, "fabric.port.info": info, **pma,
                "fabric.port.counter": other, "fabric.port.saturated": pegged,
                "fabric.port.hw_counter": hw, "fabric.device.hw_counter": device_hw}

    def faults(self) -> list[str]:
        return list(self._faults)
