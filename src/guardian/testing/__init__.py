"""Helpers for testing rules, plugins and embeddings: a fake host root to read from,
families and checked snapshots, and (as root, on a cgroup v1 memory hierarchy) real dying
memory cgroups. guardian's own tests and benchmarks use them too."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from guardian.core.snapshot import Family, Snapshot, labels_of
from guardian.hostio.host import Host
from guardian.plugin.registry import Registry, default_registry


class FakeHost:
    """A host root under a directory: write the /proc, /sys and /dev files a source or an
    action reads, then hand :attr:`host` to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = Host(root)

    def write(self, path: str, text: str) -> Path:
        """Write ``text`` at ``path`` (relative to the root, e.g. ``"proc/uptime"``)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def process(self, pid: int, comm: str, state: str = "S", ppid: int = 1,
                flags: int = 0x400000, starttime: int = 5, threads: int = 1) -> None:
        """A ``/proc/<pid>/stat`` line in the kernel's format (fs/proc/array.c,
        do_task_stat: num_threads is field 20, starttime field 22)."""
        self.write(f"proc/{pid}/stat", f"{pid} ({comm}) {state} {ppid} 0 0 0 -1 {flags} "
                                       + "0 " * 10 + f"{threads} 0 {starttime} " + "0 " * 30)


def family(label: str, members: Mapping[str, float]) -> Family:
    """A one-label family: ``family("cpu", {"0": 97.0})``."""
    return {labels_of({label: key}): float(v) for key, v in members.items()}


def snapshot(time: float, values: Mapping[str, object],
             registry: Registry | None = None) -> Snapshot:
    """A snapshot checked against the signals of ``registry`` (default: the installed
    sources), as the collector checks a source's output."""
    reg = registry or default_registry()
    return Snapshot.build(time, values, reg.catalogue().values())


# -- a synthetic node of the size guardian is for ---------------------------------------

# ethtool -S names of the ENA driver (amzn-drivers kernel/linux/ena/ena_ethtool.c:
# ena_stats_global_strings, ena_hw_stats_strings, ena_stats_tx_strings and
# ena_stats_rx_strings per queue as "queue_%u_tx_%s" / "queue_%u_rx_%s",
# ena_stats_ena_com_admin_strings as "ena_admin_q_%s").
ENA_GLOBAL = ("tx_timeout", "suspend", "resume", "wd_expired", "interface_up",
              "interface_down", "admin_q_pause", "reset_fail")
ENA_ENI = ("bw_in_allowance_exceeded", "bw_out_allowance_exceeded", "pps_allowance_exceeded",
           "conntrack_allowance_exceeded", "linklocal_allowance_exceeded",
           "conntrack_allowance_available")
ENA_TX = ("cnt", "bytes", "queue_stop", "queue_wakeup", "dma_mapping_err", "linearize",
          "linearize_failed", "napi_comp", "tx_poll", "doorbells", "prepare_ctx_err",
          "bad_req_id", "llq_buffer_copy", "missed_tx", "unmask_interrupt")
ENA_RX = ("cnt", "bytes", "rx_copybreak_pkt", "csum_good", "refil_partial", "csum_bad",
          "page_alloc_fail", "skb_alloc_fail", "dma_mapping_err", "bad_desc_num",
          "bad_req_id", "empty_rx_ring", "csum_unchecked", "lpc_warm_up", "lpc_full",
          "lpc_wrong_numa")
ENA_ADMIN = ("aborted_cmd", "submitted_cmd", "completed_cmd", "out_of_space", "no_completion")


def ena_stat_names(queues: int = 32, generation: str = "2.8.0") -> list[str]:
    """The statistics an ENA interface with ``queues`` I/O queues lists, in its order, as
    the driver release ``generation`` (a key of :data:`ENA_GENERATIONS`) names them."""
    gen = ENA_GENERATIONS[generation]
    names = [*gen.global_stats, *gen.eni_stats]
    for q in range(queues):
        names += [f"queue_{q}_tx_{s}" for s in gen.tx_stats]
        names += [f"queue_{q}_rx_{s}" for s in ENA_RX]
    return names + [f"ena_admin_q_{s}" for s in ENA_ADMIN]


@dataclass(frozen=True)
class EnaGeneration:
    """What one ENA driver release lists in ``ethtool -S`` (amzn-drivers
    kernel/linux/ena/ena_ethtool.c at its tag: ena_stats_global_strings, the ENI metrics,
    ena_stats_tx_strings) and which global statistics a device reset increments there
    (ena_netdev.c/.h at the tag: ena_down/ena_up through ena_destroy_device and
    ena_restore_device; ena_reset_device's total_resets and reason counter from 2.12.0;
    reset_fail from 2.8.0)."""

    release: str
    global_stats: tuple[str, ...]
    eni_stats: tuple[str, ...]
    tx_stats: tuple[str, ...]
    on_reset: tuple[str, ...]
    reason_counters: bool  # a counter per reset reason (missing_tx_cmpl, ...)


_GLOBAL_2_12 = ("total_resets", "reset_fail", "tx_timeout", "wd_expired", "admin_q_pause",
                "bad_tx_req_id", "bad_rx_req_id", "bad_rx_desc_num", "missing_intr",
                "suspected_poll_starvation", "missing_tx_cmpl", "rx_desc_malformed",
                "tx_desc_malformed", "invalid_state", "os_netdev_wd",
                "missing_admin_interrupt", "admin_to", "device_request_reset")
_TX_1_5 = ("cnt", "bytes", "queue_stop", "queue_wakeup", "dma_mapping_err", "linearize",
           "linearize_failed", "napi_comp", "tx_poll", "doorbells", "prepare_ctx_err",
           "bad_req_id", "missed_tx")
ENA_GENERATIONS: dict[str, EnaGeneration] = {
    "1.5.0": EnaGeneration(
        "1.5.0", ("tx_timeout", "suspend", "resume", "wd_expired", "interface_up",
                  "interface_down", "admin_q_pause"), (), _TX_1_5,
        ("interface_down", "interface_up"), False),
    "2.8.0": EnaGeneration(
        "2.8.0", ENA_GLOBAL, ENA_ENI, ENA_TX, ("interface_down", "interface_up"), False),
    "2.12.0": EnaGeneration(
        "2.12.0", (*_GLOBAL_2_12, "suspend", "resume", "interface_down", "interface_up"),
        ENA_ENI, ENA_TX, ("total_resets", "interface_down", "interface_up"), True),
    "2.17.0": EnaGeneration(
        "2.17.0", (*_GLOBAL_2_12, "missing_first_intr", "suspend", "resume",
                   "interface_down", "interface_up"),
        ENA_ENI, (*ENA_TX[:13], "missed_tx", "pending_timedout_pkts", "unmask_interrupt",
                  "lost_interrupt"),
        ("total_resets", "interface_down", "interface_up"), True),
}


# AWS EFA under /sys/class/infiniband, as the efa driver lays it out (linux
# drivers/infiniband/hw/efa/efa_verbs.c): the device-wide counters of
# EFA_DEFINE_DEVICE_STATS in <dev>/hw_counters/, the port's of EFA_DEFINE_PORT_STATS in
# ports/1/hw_counters/ (rdma_write_* since the RDMA write support, retrans_* and the
# *_remote_* events since the network statistics), each beside the core's "lifespan";
# efa_query_port answers state ACTIVE, phys_state LinkUp, EDR x4 (rate_show: "100 Gb/sec
# (4X EDR)"), efa_port_link_layer IB_LINK_LAYER_UNSPECIFIED (link_layer_show: "Unknown");
# no process_mad, so no counters/ directory. The kernel names a device efa_<n>
# (efa_main.c: ib_register_device(&dev->ibdev, "efa_%d", ...)).
# Each device's PCI function beside it: vendor 0x1d0f (PCI_VENDOR_ID_AMAZON), device
# 0xefa1, one of the ids of the driver's efa_pci_tbl (which of them a given instance type
# has is not claimed), class 0x020000 (lspci lists EFA as an "Ethernet controller"), its
# driver link to bus/pci/drivers/efa, and the device's "device" link to it (the parent the
# driver sets: ibdev.dev.parent = &pdev->dev). The addresses are made up: bus 0xe0 on,
# 32 slots a bus, clear of the GPUs' and NICs' of bench/p5.py.
EFA_PCI_DEVICE = 0xEFA1


def efa_pci_address(n: int) -> str:
    """The PCI address :func:`efa_tree` gives device ``efa_<n>``."""
    return f"0000:{0xE0 + n // 32:02x}:{n % 32:02x}.0"


def _symlink(at: Path, target: str) -> None:
    if not at.is_symlink():
        at.symlink_to(target)
EFA_DEVICE_COUNTERS = ("submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds",
                       "keep_alive_rcvd", "alloc_pd_err", "create_qp_err", "create_cq_err",
                       "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err")
EFA_PORT_COUNTERS = ("tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes",
                     "send_wrs", "recv_bytes", "recv_wrs", "rdma_read_wrs",
                     "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes",
                     "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err",
                     "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts",
                     "retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events")


def efa_tree(root: Path, devices: int = 32, values: Mapping[str, int] | None = None,
             first: int = 0) -> list[str]:
    """Lay out ``devices`` EFA devices (``efa_<first>``...) under ``root/sys/class/
    infiniband`` as the efa driver makes them (:data:`EFA_DEVICE_COUNTERS`,
    :data:`EFA_PORT_COUNTERS`, one port), each with its PCI function under
    ``root/sys/bus/pci/devices`` (:func:`efa_pci_address`): a p5.48xlarge has 32.
    Counters are 0 unless ``values`` names them. Returns the devices' names."""
    fake = FakeHost(root)
    vals = values or {}
    names = [f"efa_{n}" for n in range(first, first + devices)]
    (root / "sys/bus/pci/drivers/efa").mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(names, start=first):
        dev = f"sys/class/infiniband/{name}"
        pci = f"sys/bus/pci/devices/{efa_pci_address(n)}"
        for file, text in (("vendor", "0x1d0f"), ("device", f"0x{EFA_PCI_DEVICE:04x}"),
                           ("class", "0x020000")):
            fake.write(f"{pci}/{file}", text + "\n")
        _symlink(root / pci / "driver", "../../drivers/efa")
        port = f"{dev}/ports/1"
        for file, text in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                           ("rate", "100 Gb/sec (4X EDR)"), ("link_layer", "Unknown")):
            fake.write(f"{port}/{file}", text + "\n")
        for where, counters in ((dev, EFA_DEVICE_COUNTERS), (port, EFA_PORT_COUNTERS)):
            fake.write(f"{where}/hw_counters/lifespan", "10\n")
            for c in counters:
                fake.write(f"{where}/hw_counters/{c}", f"{vals.get(c, 0)}\n")
        _symlink(root / dev / "device", f"../../../bus/pci/devices/{efa_pci_address(n)}")
    return names


class SyntheticNode:
    """The signals the shipped rules read, shaped like a large healthy GPU node: an ENA
    interface with ``queues`` queues (about 1,000 ``nic.stat`` members at 32), ``cores``
    cores, ``units`` systemd units. :meth:`values` builds a fresh value map per tick, with
    fresh label tuples, as the sources do."""

    def __init__(self, queues: int = 32, cores: int = 64, units: int = 200) -> None:
        self.stats = ena_stat_names(queues)
        self.cores = [str(c) for c in range(cores)]
        self.units = [f"unit-{u}.service" for u in range(units)]

    def values(self, tick: int) -> dict[str, object]:
        """Values at tick ``tick``: counters rising steadily, gauges wobbling."""
        nic = {labels_of({"iface": "eth0", "driver": "ena", "stat": s}):
               float(tick * (i % 97)) for i, s in enumerate(self.stats)
               if s != "conntrack_allowance_available"}
        levels = {labels_of({"iface": "eth0", "driver": "ena",
                             "stat": "conntrack_allowance_available"}): 50000.0 - tick}
        per_core = {name: {labels_of({"cpu": c}): float((tick * step + i) % 30)
                           for i, c in enumerate(self.cores)}
                    for name, step in (("cpu.core.sys_pct", 7), ("cpu.ksoftirqd_pct", 3))}
        counters = {name: {labels_of({"cpu": c}): float(tick * (i % 5))
                           for i, c in enumerate(self.cores)}
                    for name in ("softnet.time_squeeze", "softnet.dropped")}
        patterns = ("ena_reset_triggered", "nic_tx_timeout", "ena_tx_paused",
                    "ena_tx_missing_completion")
        return {
            "nic.stat": nic, "nic.gauge": levels, **per_core, **counters,
            "memcg.dying": float(50 + tick % 20), "memcg.live": 400.0,
            "kmsg.matches": {labels_of({"pattern": p}): 0.0 for p in patterns},
            "processes.top_system_cpu_pct": {
                labels_of({"comm": c, "uid": "0", "cgroup": f"/system.slice/{c}.service"}):
                float(tick % 7 + n) for n, c in enumerate(("kubelet", "containerd",
                                                           "python3"))},
            "systemd.unit_restarts_recent": {labels_of({"unit": u}): 0.0
                                             for u in self.units},
            "processes.zombies_by_parent": {}, "processes.zombies": 0.0,
        }


# -- real kernel objects (root) ---------------------------------------------------------

MEMCG_V1 = Path("/sys/fs/cgroup/memory")

MEMCG_MAKER = r"""
import os, sys
parent, files, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
me = str(os.getpid())
for i in range(n):
    cg = os.path.join(parent, f"cg{i}")
    os.mkdir(cg)
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(me)
    with open(os.path.join(files, f"f{i}"), "wb") as f:
        f.write(os.urandom(16384))  # page cache charged to this memcg
    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
        f.write(me)
    os.rmdir(cg)  # removed, but its page cache keeps it alive: dying
"""


@contextlib.contextmanager
def dying_memcgs(n: int) -> Iterator[Path]:
    """Make ``n`` real dying memory cgroups under a test-owned parent cgroup. Yields the
    directory of the files whose page cache pins them; on exit the files are removed
    (which frees that cache and so releases the memcgs) and the parent cgroup too."""
    parent = MEMCG_V1 / f"guardian-test-{os.getpid()}-{time.monotonic_ns()}"
    files = Path(tempfile.mkdtemp(prefix="guardian-memcg-", dir="/var/tmp"))
    parent.mkdir()
    try:
        subprocess.run([sys.executable, "-c", MEMCG_MAKER, str(parent), str(files), str(n)],
                       check=True, timeout=300)
        yield files
    finally:
        shutil.rmtree(files, ignore_errors=True)
        for _ in range(50):
            try:
                parent.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        settle_memcgs()


def memcg_count() -> int:
    for line in Path("/proc/cgroups").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "memory":
            return int(parts[2])
    return 0


def settle_memcgs(timeout: float = 30.0) -> None:
    """Wait until released memcgs are gone (the kernel frees them asynchronously), so a
    later test counting dying memcgs does not see this one's clean-up as a fall."""
    deadline = time.monotonic() + timeout
    last = memcg_count()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = memcg_count()
        if now == last:
            return
        last = now
