"""The fabric source on /sys/class/infiniband trees recorded on real machines
(tests/fixtures/sysfs/infiniband, README there: prometheus/procfs's and node_exporter's
captures) and an EFA stand-in made from the efa driver's names; the shipped rules fire
through the real collector and engine when a recorded port goes down.

Line formats are the kernel's (drivers/infiniband/core/sysfs.c): state_show
``"%d: %s"``, phys_state_show ``"%u: %s"``, rate_show ``"%d%s Gb/sec (%dX%s)"`` (the
``%s`` after the number being ``".5"`` for 2.5 Gb/s lanes), show_pma_counter ``"%u\\n"``
or, in older kernels, ``"N/A (no PMA)\\n"``; print_ndev ``"%s\\n"`` of a GID's netdev."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from guardian.core.snapshot import Family, labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.hostio.infiniband import parse_counter, parse_rate, parse_state, saturated
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.fabric import FabricConfig, FabricSource
from guardian.testing import (
    EFA_DEVICE_COUNTERS,
    EFA_PORT_COUNTERS,
    FakeHost,
    efa_pci_address,
    efa_tree,
)
from tests.support.checkout import FIXTURES, RULES

TREES = FIXTURES / "sysfs" / "infiniband"


def pci_function(root: Path, address: str, vendor: str, device: str, pci_class: str,
                 driver: str | None = None, rdma: str | None = None,
                 physfn: str | None = None) -> Path:
    """A PCI function under root/sys/bus/pci/devices as drivers/pci/pci-sysfs.c prints
    it (vendor and device "0x%04x\\n", class "0x%06x\\n"), its ``driver`` link
    (drivers/base/dd.c), an SR-IOV VF's ``physfn`` link (drivers/pci/iov.c) and, for the
    RDMA device ``rdma`` in /sys/class/infiniband, that device's ``device`` link to it."""
    fake = FakeHost(root)
    base = f"sys/bus/pci/devices/{address}"
    for file, text in (("vendor", vendor), ("device", device), ("class", pci_class)):
        fake.write(f"{base}/{file}", text + "\n")
    if driver:
        (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        (root / base / "driver").symlink_to(f"../../drivers/{driver}")
    if physfn:
        (root / base / "physfn").symlink_to(f"../{physfn}")
    if rdma:
        (root / "sys/class/infiniband" / rdma).mkdir(parents=True, exist_ok=True)
        (root / "sys/class/infiniband" / rdma / "device").symlink_to(
            f"../../../bus/pci/devices/{address}")
    return root / base


def missing(address: str, pci_id: str, driver: str, state: str) -> tuple[tuple[str, str], ...]:
    return labels_of({"pci": address, "pci_id": pci_id, "driver": driver, "state": state})


def port(device: str, n: str = "1") -> tuple[tuple[str, str], ...]:
    return labels_of({"device": device, "port": n})


def member(device: str, counter: str, n: str = "1") -> tuple[tuple[str, str], ...]:
    return labels_of({"device": device, "port": n, "counter": counter})


def fam(out: dict[str, object], name: str) -> Family:
    v = out[name]
    assert isinstance(v, dict)
    return v


@pytest.mark.parametrize(("raw", "want"), [
    (b"4: ACTIVE\n", 4), (b"1: DOWN\n", 1), (b"5: LinkUp\n", 5),
    (b"4: PortConfigurationTraining\n", 4), (b"garbage\n", None), (None, None)])
def test_state_lines(raw: bytes | None, want: int | None) -> None:
    assert parse_state(raw) == want


@pytest.mark.parametrize(("raw", "want"), [
    (b"100 Gb/sec (4X EDR)\n", 100.0), (b"2.5 Gb/sec (1X SDR)\n", 2.5),
    (b"400 Gb/sec (4X NDR)\n", 400.0), (b"Gb/sec\n", None)])
def test_rate_lines(raw: bytes, want: float | None) -> None:
    assert parse_rate(raw) == want


def test_a_counter_the_device_could_not_answer_is_no_value_never_zero() -> None:
    assert parse_counter(b"N/A (no PMA)\n") is None
    assert parse_counter(None) is None
    assert parse_counter(b"0\n") == 0


def test_ceilings_are_the_kernels_widths() -> None:
    """PORT_PMA_ATTR(link_downed, 2, 8, 56), (symbol_error, 0, 16, 32),
    (excessive_buffer_overrun_errors, 10, 4, 156), (port_xmit_wait, 0, 32, 320)."""
    assert saturated("link_downed", 255) and not saturated("link_downed", 254)
    assert saturated("symbol_error", 65535)
    assert saturated("excessive_buffer_overrun_errors", 15)
    assert saturated("port_xmit_wait", 2**32 - 1)
    assert saturated("port_xmit_data", 2**32 - 1)  # 32 bits without extended counters
    assert not saturated("port_xmit_data", 2**32)  # past it: a 64-bit counter
    assert not saturated("out_of_buffer", 2**32 - 1)  # a driver's 64-bit hw_counter


def test_procfs_recording_omni_path_connectx3_connectx4lx() -> None:
    """prometheus/procfs's tree: hfi1_0 an HPE OP101 Omni-Path adapter at 100 Gb/s (4X
    EDR); mlx4_0 a ConnectX-3 (MT4099) with two QDR ports; mlx5_0 an MT4118 with mlx5's
    hw_counters, whose recorded phys_state reads "4: ACTIVE" (no LinkUp)."""
    src = FabricSource(Host(TREES / "procfs"))
    assert src.unavailable() is None
    out = src.collect(0.0)
    assert src.faults() == []
    assert fam(out, "fabric.port.rate_gbps") == {
        port("hfi1_0"): 100.0, port("mlx4_0"): 40.0, port("mlx4_0", "2"): 40.0,
        port("mlx5_0"): 25.0}
    assert set(fam(out, "fabric.port.state").values()) == {4.0}
    assert fam(out, "fabric.port.phys_state")[port("mlx5_0")] == 4.0
    assert fam(out, "fabric.port.link_up")[port("mlx5_0")] == 0.0
    assert fam(out, "fabric.port.link_up")[port("hfi1_0")] == 1.0
    info = fam(out, "fabric.port.info")
    assert labels_of({"device": "mlx4_0", "port": "2", "link_layer": "InfiniBand",
                      "netdev": ""}) in info  # "InfiniBand\n\n" as recorded
    assert fam(out, "fabric.port.port_xmit_data")[port("mlx5_0")] == 2880761508848.0
    assert fam(out, "fabric.port.port_xmit_wait")[port("mlx4_0", "2")] == 3846.0
    hw = fam(out, "fabric.port.hw_counter")
    assert hw[member("mlx5_0", "out_of_buffer")] == 0.0
    assert hw[member("mlx5_0", "local_ack_timeout_err")] == 131.0
    assert member("mlx5_0", "lifespan") not in hw  # the kernel's cache time, no counter
    assert fam(out, "fabric.device.hw_counter") == {}


def test_node_exporter_recording_iwarp_without_pma_and_a_pegged_counter() -> None:
    """prometheus/node_exporter's tree: i40iw0 an Intel X722 iWARP device whose every
    PortCounters file reads "N/A (no PMA)"; mlx4_0 a ConnectX-3 whose port_xmit_wait
    stopped at 4294967295 and which lists a port_rcv_discards the kernel's table lacks."""
    src = FabricSource(Host(TREES / "node_exporter"))
    out = src.collect(0.0)
    for name in ("fabric.port.symbol_error", "fabric.port.link_downed",
                 "fabric.port.port_xmit_data"):
        assert port("i40iw0") not in fam(out, name)  # no value, not 0
    assert fam(out, "fabric.port.state")[port("i40iw0")] == 4.0
    assert port("mlx4_0") not in fam(out, "fabric.port.port_xmit_wait")
    pegged = fam(out, "fabric.port.saturated")
    assert pegged[member("mlx4_0", "port_xmit_wait")] == 1.0
    assert pegged[member("mlx4_0", "port_xmit_discards")] == 0.0
    assert fam(out, "fabric.port.port_xmit_discards")[port("mlx4_0")] == 5.0
    assert fam(out, "fabric.port.port_rcv_packets")[port("mlx4_0")] == 6825908347.0
    assert fam(out, "fabric.port.counter") == {member("mlx4_0", "port_rcv_discards"): 0.0}


def test_efa_standin_is_what_the_helper_lays_out(tmp_path: Path) -> None:
    """The checked-in stand-in and guardian.testing.efa_tree agree file for file."""
    efa_tree(tmp_path, 1)

    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

    def links(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): os.readlink(p) for p in root.rglob("*")
                if p.is_symlink()}
    assert files(tmp_path) == files(TREES / "efa-standin")
    assert links(tmp_path) == links(TREES / "efa-standin") == {
        "sys/class/infiniband/efa_0/device": "../../../bus/pci/devices/0000:e0:00.0",
        "sys/bus/pci/devices/0000:e0:00.0/driver": "../../drivers/efa"}
    src = FabricSource(Host(TREES / "efa-standin"))
    assert src.unconfigured() is None
    out = src.collect(0.0)
    assert (out["fabric.devices"], out["fabric.devices.expected"]) == (1.0, 1.0)
    assert out["fabric.devices.missing"] == {} and src.faults() == []
    dev = fam(out, "fabric.device.hw_counter")
    assert set(dev) == {labels_of({"device": "efa_0", "counter": c})
                        for c in EFA_DEVICE_COUNTERS}
    assert set(fam(out, "fabric.port.hw_counter")) == {member("efa_0", c)
                                                       for c in EFA_PORT_COUNTERS}
    assert fam(out, "fabric.port.symbol_error") == {}  # no PMA: no counters/ at all
    assert labels_of({"device": "efa_0", "port": "1", "link_layer": "Unknown",
                      "netdev": ""}) in fam(out, "fabric.port.info")
    assert fam(out, "fabric.port.rate_gbps") == {port("efa_0"): 100.0}


def test_a_node_without_rdma_hardware_has_nothing_to_read(tmp_path: Path) -> None:
    """devices = "auto": no device in /sys/class/infiniband and no InfiniBand controller or
    EFA function on the PCI bus is "not configured" with that reason, as the GPU source
    without an NVIDIA GPU: its rules blind by choice, named, never counted healthy (before,
    the families were empty and every rule read ok). A ConnectX-5 used as Ethernet
    (15b3:1017, class 0x020000: Seagate/cortx-prvsnr's mlnx_driver/init.sls selects it
    with `lspci -d "15b3:1017:0200"`) without an RDMA device is a plain NIC and does not
    count. expect = N or devices = "expected" make the source read anyway. Only a host
    without /sys/class at all is unavailable."""
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    pci_function(tmp_path, "0000:3b:00.0", "0x15b3", "0x1017", "0x020000", "mlx5_core")
    host = Host(tmp_path)
    collector = Collector(host, [FabricSource(host)])
    assert collector.sources == []
    assert collector.unconfigured["fabric"] == (
        'devices = "auto" and no RDMA device on this node: none in /sys/class/infiniband, '
        "and no InfiniBand controller (PCI class 0x0207) or EFA (vendor 0x1d0f) on its PCI "
        "bus")
    for config in (FabricConfig(expect=1), FabricConfig(devices="expected")):
        src = FabricSource(host, config)
        assert src.unconfigured() is None and src.unavailable() is None
        out = src.collect(0.0)
        assert out["fabric.devices"] == 0.0 and out["fabric.devices.expected"] == 1.0
        assert out["fabric.devices.missing"] == {}
        assert src.faults() == ["0 RDMA device(s) in /sys/class/infiniband, 1 expected"
                                + (" (expect = 1)" if config.expect else "")]
    assert FabricSource(Host(tmp_path / "nowhere")).unconfigured() is None
    assert FabricSource(Host(tmp_path / "nowhere")).unavailable() is not None


def test_an_rdma_function_on_the_bus_makes_the_source_read(tmp_path: Path) -> None:
    """An EFA function (1d0f:efa1, efa_pci_tbl) with no driver bound: the node has RDMA
    hardware, and the source runs to say it lacks its device."""
    pci_function(tmp_path, "0000:e0:00.0", "0x1d0f", "0xefa1", "0x020000")
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    assert FabricSource(Host(tmp_path)).unconfigured() is None


def test_an_unreadable_port_file_is_no_value_and_a_fault(tmp_path: Path) -> None:
    shutil.copytree(TREES / "procfs", tmp_path, dirs_exist_ok=True)
    base = tmp_path / "sys/class/infiniband/mlx4_0/ports/1"
    (base / "state").unlink()
    (base / "counters" / "symbol_error").write_text("garbage\n")
    src = FabricSource(Host(tmp_path))
    out = src.collect(0.0)
    assert port("mlx4_0") not in fam(out, "fabric.port.state")
    assert port("mlx4_0") not in fam(out, "fabric.port.active")
    assert port("mlx4_0") not in fam(out, "fabric.port.symbol_error")
    assert fam(out, "fabric.port.state")[port("mlx4_0", "2")] == 4.0
    assert src.faults() == [f"{base}: cannot read state"]


def test_netdev_from_the_roce_gid_or_the_ipoib_dev_port(tmp_path: Path) -> None:
    """RoCE: ports/1/gid_attrs/ndevs/0 names the netdev (print_ndev). IPoIB: the PCI
    function's net/ib0 and net/ib1, told apart by dev_port = port - 1 (ipoib_main.c:
    ``priv->dev->dev_port = priv->port - 1``)."""
    fake = FakeHost(tmp_path)
    for dev, ports in (("mlx5_0", ("1",)), ("mlx4_0", ("1", "2"))):
        for p in ports:
            for f, text in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                            ("rate", "100 Gb/sec (4X EDR)")):
                fake.write(f"sys/class/infiniband/{dev}/ports/{p}/{f}", text + "\n")
    fake.write("sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n")
    fake.write("sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "ens7f0np0\n")
    for p in ("1", "2"):
        fake.write(f"sys/class/infiniband/mlx4_0/ports/{p}/link_layer", "InfiniBand\n")
        fake.write(f"sys/class/infiniband/mlx4_0/device/net/ib{int(p) - 1}/dev_port",
                   f"{int(p) - 1}\n")
    info = fam(FabricSource(Host(tmp_path)).collect(0.0), "fabric.port.info")
    assert set(info) == {
        labels_of({"device": "mlx5_0", "port": "1", "link_layer": "Ethernet",
                   "netdev": "ens7f0np0"}),
        labels_of({"device": "mlx4_0", "port": "1", "link_layer": "InfiniBand",
                   "netdev": "ib0"}),
        labels_of({"device": "mlx4_0", "port": "2", "link_layer": "InfiniBand",
                   "netdev": "ib1"})}


def test_a_device_that_appears_is_read_at_the_next_collection(tmp_path: Path) -> None:
    efa_tree(tmp_path, 2)
    src = FabricSource(Host(tmp_path))
    assert len(fam(src.collect(0.0), "fabric.port.state")) == 2
    efa_tree(tmp_path, 1, first=2)
    assert len(fam(src.collect(15.0), "fabric.port.state")) == 3
    shutil.rmtree(tmp_path / "sys/class/infiniband/efa_0")
    assert set(fam(src.collect(30.0), "fabric.port.state")) == {port("efa_1"),
                                                                port("efa_2")}


def test_a_recorded_port_going_down_fires_the_shipped_rules(tmp_path: Path) -> None:
    """The done criterion of issue 44: procfs's ConnectX-3 port 1 (mlx4_0), copied, goes
    DOWN with its link Polling and LinkDownedCounter rising from the recorded 0; the
    collector reads it and the shipped rules fire through the engine. Its second port,
    untouched, stays out of the evidence."""
    shutil.copytree(TREES / "procfs", tmp_path, dirs_exist_ok=True)
    base = tmp_path / "sys/class/infiniband/mlx4_0/ports/1"
    host = Host(tmp_path)
    collector = Collector(host, [FabricSource(host)])
    engine = Engine(load_rules([RULES]))
    fired: dict[int, set[str]] = {}
    evidence = {}
    for tick in range(8):
        if tick == 4:
            (base / "state").write_text("1: DOWN\n")
            (base / "phys_state").write_text("2: Polling\n")
            (base / "counters" / "link_downed").write_text("1\n")
        snap = collector.collect(tick * 15.0)
        assert snap.errors == {}
        for d in engine.evaluate(snap):
            if d.kind == "firing":
                evidence[d.rule] = d.evidence.get("matched")
        fired[tick] = {r for r in engine.firing() if r.startswith("fabric-")}
    assert fired[3] == set()
    assert fired[4] == {"fabric-port-down", "fabric-link-downed"}
    assert fired[7] == {"fabric-port-down", "fabric-link-downed"}
    assert evidence["fabric-port-down"] == {port("mlx4_0"): 0.0}
    assert evidence["fabric-link-downed"] == {port("mlx4_0"): 1.0}


def test_a_collection_of_32_efa_devices_reads_every_file_once(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """The p5.48xlarge shape: one open and one read per file a tick (no listing once the
    layout is known; link_layer, which changes only with the device, read with it), 37
    files a device: state, phys_state, rate and the counters."""
    efa_tree(tmp_path, 32)
    src = FabricSource(Host(tmp_path))
    src.collect(0.0)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: object, **kw: object) -> int:
        opened.append(path)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(os, "open", counting_open)
    out = src.collect(15.0)
    assert len(opened) == len(set(opened)) == 32 * (3 + len(EFA_PORT_COUNTERS)
                                                    + len(EFA_DEVICE_COUNTERS))
    assert len(fam(out, "fabric.port.hw_counter")) == 32 * len(EFA_PORT_COUNTERS)


def test_efa_devices_the_driver_loses_are_named_by_their_pci_function(tmp_path: Path) -> None:
    """Four EFA functions (1d0f:efa1, efa_pci_tbl) with their devices; then efa_1's
    function leaves the bus, efa_2's unbinds (no driver: the efa driver removed it after
    an error, or failed to probe it again) and efa_3's device goes while its driver stays
    bound. Each is missing with what became of it, and a fault of the source; the
    devices coming back clear them."""
    efa_tree(tmp_path, 4)
    host = Host(tmp_path)
    src = FabricSource(host)
    out = src.collect(0.0)
    assert (out["fabric.devices"], out["fabric.devices.expected"]) == (4.0, 4.0)
    assert out["fabric.devices.missing"] == {} and src.faults() == []
    ib, bus = tmp_path / "sys/class/infiniband", tmp_path / "sys/bus/pci/devices"
    for n in (1, 2, 3):
        shutil.rmtree(ib / f"efa_{n}")
    shutil.rmtree(bus / efa_pci_address(1))
    (bus / efa_pci_address(2) / "driver").unlink()
    out = src.collect(15.0)
    a1, a2, a3 = (efa_pci_address(n) for n in (1, 2, 3))
    assert out["fabric.devices"] == 1.0 and out["fabric.devices.expected"] == 4.0
    assert out["fabric.devices.missing"] == {
        missing(a1, "1d0f:efa1", "", "off_bus"): 1.0,
        missing(a2, "1d0f:efa1", "", "unbound"): 1.0,
        missing(a3, "1d0f:efa1", "efa", "no_rdma"): 1.0}
    assert src.faults() == [
        f"PCI {a1} (1d0f:efa1, driver efa): no RDMA device in /sys/class/infiniband (gone "
        "from the PCI bus)",
        f"PCI {a2} (1d0f:efa1): no RDMA device in /sys/class/infiniband (no driver bound)",
        f"PCI {a3} (1d0f:efa1, driver efa): no RDMA device in /sys/class/infiniband (its "
        "driver bound, no RDMA device)"]
    efa_tree(tmp_path, 3, first=1)  # probed again: back on the bus, bound, registered
    out = src.collect(30.0)
    assert out["fabric.devices"] == 4.0 and out["fabric.devices.missing"] == {}
    assert src.faults() == []


def test_recorded_devices_beside_functions_that_must_have_one(tmp_path: Path) -> None:
    """procfs's recorded tree (hfi1_0, mlx4_0, mlx5_0: no PCI side recorded) with PCI
    functions beside it: a ConnectX-7 in InfiniBand mode (15b3:1021, class 0x020700, as
    lspci -nn lists them in NVIDIA/gpu-admin-tools pci/cx7.py) whose mlx5_core is bound
    without mlx5_ib, one unbound, one an SR-IOV VF of the host (physfn), one bound to
    vfio-pci (handed to a guest), and a ConnectX-5 Ethernet function (15b3:1017, class
    0x020000) without an RDMA device. Only the first two must have one."""
    shutil.copytree(TREES / "procfs", tmp_path, dirs_exist_ok=True)
    cx7 = ("0x15b3", "0x1021", "0x020700")
    pci_function(tmp_path, "0000:05:00.0", *cx7, driver="mlx5_core")
    pci_function(tmp_path, "0000:05:00.1", *cx7)
    pci_function(tmp_path, "0000:05:00.2", *cx7, driver="mlx5_core", physfn="0000:05:00.0")
    pci_function(tmp_path, "0000:05:00.3", *cx7, driver="vfio-pci")
    pci_function(tmp_path, "0000:3b:00.0", "0x15b3", "0x1017", "0x020000", "mlx5_core")
    src = FabricSource(Host(tmp_path))
    out = src.collect(0.0)
    assert out["fabric.devices"] == 3.0 and out["fabric.devices.expected"] == 2.0
    assert out["fabric.devices.missing"] == {
        missing("0000:05:00.0", "15b3:1021", "mlx5_core", "no_rdma"): 1.0,
        missing("0000:05:00.1", "15b3:1021", "", "unbound"): 1.0}
    assert len(src.faults()) == 2
    assert fam(out, "fabric.port.rate_gbps")[port("mlx4_0")] == 40.0  # the rest stands
    # mlx5_ib loaded: each registers its device (the core links it to its function)
    pci_function(tmp_path, "0000:05:00.4", *cx7)  # (a second probe of the bus)
    for n, address in enumerate(("0000:05:00.0", "0000:05:00.1")):
        dev = tmp_path / "sys/class/infiniband" / f"mlx5_{n + 1}"
        (dev / "ports").mkdir(parents=True)
        (dev / "device").symlink_to(f"../../../bus/pci/devices/{address}")
    out = src.collect(15.0)
    assert out["fabric.devices.missing"] == {
        missing("0000:05:00.4", "15b3:1021", "", "unbound"): 1.0}


def test_expect_counts_what_the_pci_bus_cannot_tell(tmp_path: Path) -> None:
    """expect = N for a node of N devices (a p5.48xlarge: expect = 32); here 4, with 3
    laid out (the 4th gone before guardian started, so nothing on the bus names it):
    fabric.devices is below fabric.devices.expected, and the source says so."""
    efa_tree(tmp_path, 3)
    src = FabricSource(Host(tmp_path), FabricConfig(expect=4))
    out = src.collect(0.0)
    assert (out["fabric.devices"], out["fabric.devices.expected"]) == (3.0, 4.0)
    assert out["fabric.devices.missing"] == {}
    assert src.faults() == ["3 RDMA device(s) in /sys/class/infiniband, 4 expected "
                            "(expect = 4)"]


def test_a_lost_efa_device_fires_the_shipped_rule_after_2_minutes(tmp_path: Path) -> None:
    """Through the collector and the engine: efa_1 unbinds at tick 4 (15 s ticks);
    fabric-device-missing holds for 2 minutes (8 ticks) and fires naming its function;
    fabric-devices-fewer leaves it to that rule. With expect = 3 and nothing on the bus
    to name the third device, fabric-devices-fewer fires instead."""
    efa_tree(tmp_path, 2)
    host = Host(tmp_path)
    engine = Engine(load_rules([RULES]))
    collector = Collector(host, [FabricSource(host)])
    fired: dict[int, set[str]] = {}
    evidence = {}
    for tick in range(14):
        if tick == 4:
            shutil.rmtree(tmp_path / "sys/class/infiniband/efa_1")
            (tmp_path / "sys/bus/pci/devices" / efa_pci_address(1) / "driver").unlink()
        for d in engine.evaluate(collector.collect(tick * 15.0)):
            if d.kind == "firing":
                evidence[d.rule] = d.evidence.get("matched")
        fired[tick] = {r for r in engine.firing() if r.startswith("fabric-")}
    assert fired[11] == set() and fired[12] == fired[13] == {"fabric-device-missing"}
    assert evidence["fabric-device-missing"] == {
        missing(efa_pci_address(1), "1d0f:efa1", "", "unbound"): 1.0}
    collector = Collector(host, [FabricSource(host, FabricConfig(expect=3))])
    engine = Engine(load_rules([RULES]))
    shutil.rmtree(tmp_path / "sys/bus/pci/devices" / efa_pci_address(1))
    for tick in range(9):
        engine.evaluate(collector.collect(tick * 15.0))
    assert {r for r in engine.firing() if r.startswith("fabric-")} == {"fabric-devices-fewer"}
