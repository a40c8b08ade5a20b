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
from guardian.sources.fabric import FabricSource
from guardian.testing import EFA_DEVICE_COUNTERS, EFA_PORT_COUNTERS, FakeHost, efa_tree
from tests.support.checkout import FIXTURES, RULES

TREES = FIXTURES / "sysfs" / "infiniband"


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
    assert files(tmp_path) == files(TREES / "efa-standin")
    out = FabricSource(Host(TREES / "efa-standin")).collect(0.0)
    dev = fam(out, "fabric.device.hw_counter")
    assert set(dev) == {labels_of({"device": "efa_0", "counter": c})
                        for c in EFA_DEVICE_COUNTERS}
    assert set(fam(out, "fabric.port.hw_counter")) == {member("efa_0", c)
                                                       for c in EFA_PORT_COUNTERS}
    assert fam(out, "fabric.port.symbol_error") == {}  # no PMA: no counters/ at all
    assert labels_of({"device": "efa_0", "port": "1", "link_layer": "Unknown",
                      "netdev": ""}) in fam(out, "fabric.port.info")
    assert fam(out, "fabric.port.rate_gbps") == {port("efa_0"): 100.0}


def test_a_host_without_rdma_devices_has_empty_families_not_an_outage(
        tmp_path: Path) -> None:
    """As ethtool on a host without an ENA NIC: the source runs, its families have no
    members (`guardian signals` shows them as `-`) and the rules over them hold false, so
    nothing is blind. Only a host without /sys/class at all is unavailable."""
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    src = FabricSource(Host(tmp_path))
    assert src.unavailable() is None
    out = src.collect(0.0)
    assert all(v == {} for v in out.values()) and src.faults() == []
    assert FabricSource(Host(tmp_path / "nowhere")).unavailable() is not None


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
