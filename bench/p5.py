"""The node guardian is for, measured: a p5.48xlarge-shaped host root (192 CPUs, 8 GPUs,
32 EFA devices, 4 ENA NICs of 32 queues, 3,000 processes, 2,000 memory cgroups), the
daemon on it at a 15 s tick against node_exporter on the same tree, and the tick taken
apart.

The tree (a temporary directory, removed after) is made from recorded files and
generated ones:
- /proc: each process's stat and status are recorded ones (tests/fixtures/procfs, from
  prometheus/procfs's fixtures) with pid, name, parent, times and thread count replaced
  (its comm and cgroup are generated); stat, softirqs, net/softnet_stat and pressure/*
  keep the recorded files' other lines and columns, widened to 192 CPUs; net/dev,
  interrupts (the ENA vectors as the driver names them) and the cgroup2 mountinfo are
  generated.
- /sys: class/net with 4 ENA NICs of 32 queues (the layout of tests/support/sysfs.py),
  class/infiniband with 32 EFA devices (guardian.testing.efa_tree, the efa driver's
  names), the 8 GPUs' PCI devices (vendor 0x10de, class 0x0302), and fs/cgroup, a cgroup2
  hierarchy of 2,000 memory cgroups laid out as a Kubernetes node's (system.slice,
  kubepods.slice by QoS class, pod and container).
- /dev/kmsg: a link to this machine's own (a quiet kernel log).
Every 15 s the bench advances the counters (CPU times, softirqs, softnet, net/dev, the
EFA ports' traffic, 60 busy processes' CPU times), each file replaced whole.

What a host root cannot hold, the daemon is given by stand-ins loaded before it starts
(``python bench/p5.py guardian ARGS``): the GPUs answer through :class:`RecordedNvml`
over tests/fixtures/nvml/h100x8.json made healthy (every GPU answers as
GPU 0 does, no Xid, none lost), so NVML's own cost in the driver is not in the figure;
the ENA NICs answer the ETHTOOL ioctls with the driver's 2.8.0 names
(guardian.testing.ena_stat_names: 1,011 a NIC) and rising values packed as the kernel
packs its reply, which guardian's own parser reads, so the kernel's and the device's side
of ETHTOOL_GSTATS (the ENI counters are an admin command to the device) is not in it
either. node_exporter has no stand-in: its ethtool collector finds the four NICs in the
tree but their ioctls fail (they are not in this namespace), and it has no GPU collector.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import NODE_EXPORTER_COLLECTORS, REPO, cpu_seconds, figure, node_exporter, rss_mib

CPUS, GPUS, EFAS, NICS, QUEUES, PROCESSES, MEMCGS = 192, 8, 32, 4, 32, 3000, 2000
TICK = 15.0
BUSY = 60  # processes whose CPU time rises (the top-burner path of the processes source)
RECORDED = REPO / "tests" / "fixtures" / "procfs" / "proc"
NIC_NAMES = [f"ens{32 + i}" for i in range(NICS)]
NIC_PCI = [f"0000:{0x4e + 0x10 * i:02x}:00.0" for i in range(NICS)]
NVML_RECORDING = REPO / "tests" / "fixtures" / "nvml" / "h100x8.json"
# A child cgroup's files: the 18 this machine's kernel (6.18) makes in one of its cgroup2
# directories with no controller enabled (listed from its /sys/fs/cgroup/unified), and
# the interface files Documentation/admin-guide/cgroup-v2.rst names for the memory, cpu,
# io and pids controllers a Kubernetes node enables (the cgroups source lists each
# directory to find memory.current: the names are what it walks)
CGROUP_FILES = (  # noqa: SIM905 (the names as the kernel lists them)
    "cgroup.controllers cgroup.events cgroup.freeze cgroup.kill cgroup.max.depth "
    "cgroup.max.descendants cgroup.pressure cgroup.procs cgroup.stat cgroup.stat.local "
    "cgroup.subtree_control cgroup.threads cgroup.type cpu.pressure cpu.stat cpu.stat.local "
    "io.pressure memory.pressure "
    "memory.current memory.min memory.low memory.high memory.max memory.reclaim memory.peak "
    "memory.oom.group memory.events memory.events.local memory.stat memory.numa_stat "
    "memory.swap.current memory.swap.high memory.swap.peak memory.swap.max "
    "memory.swap.events memory.zswap.current memory.zswap.max memory.zswap.writeback "
    "cpu.weight cpu.weight.nice cpu.max cpu.max.burst cpu.idle cpu.uclamp.min cpu.uclamp.max "
    "io.stat io.weight io.max io.latency pids.current pids.max pids.peak pids.events").split()
KTHREADS = ("cpuhp/{}", "migration/{}", "ksoftirqd/{}", "kworker/{}:0", "kworker/{}:0H")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _replace(path: Path, text: str) -> None:
    """Replace a file whole, so a reader sees the old text or the new, never part."""
    tmp = path.with_name(f".{path.name}.new")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text)
    os.replace(tmp, path)


def _stat_fields(text: str) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a recorded /proc/<pid>/stat line."""
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def _trim_intr(line: str) -> str:
    if not line.startswith("intr "):
        return line
    counts = line.split()
    last = max(i for i, c in enumerate(counts) if c != "0")
    return " ".join(counts[:last + 1])


class P5Node:
    """The tree under ``root`` and the counters :meth:`advance` moves."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        self.sys = root / "sys"
        self.step = 0
        self.busy: list[tuple[int, str, str]] = []  # (pid, comm, stat template)
        # recorded templates: a user process (with threads), a kernel thread, a status
        _, self.user_fields = _stat_fields((RECORDED / "27079" / "stat").read_text())
        _, self.kthread_fields = _stat_fields((RECORDED / "26232" / "stat").read_text())
        self.status = (RECORDED / "26231" / "status").read_text()
        stat = (RECORDED / "stat").read_text().splitlines()
        self.cpu_rows = [ln.split()[1:] for ln in stat if re.match(r"cpu\d", ln)]
        # the recorded intr line (131,962 characters: one count per IRQ number of a
        # machine with 65,960) ends after its last non-zero count: node_exporter 1.5.0's
        # cpu and stat collectors fail on a /proc/stat line over 64 KiB (bufio.Scanner's
        # limit: prometheus/procfs#546, node_exporter#2744), and the peer must do its work
        self.stat_rest = [_trim_intr(ln) for ln in stat if not ln.startswith("cpu")]
        softirqs = (RECORDED / "softirqs").read_text().splitlines()[1:]
        self.softirq_rows = [(ln.split(":")[0].strip(), [int(x) for x in ln.split(":")[1].split()])
                             for ln in softirqs if ":" in ln]
        softnet = (RECORDED / "net" / "softnet_stat").read_text().split("\n")
        self.softnet_row = [int(x, 16) for x in max((r.split() for r in softnet), key=len)]

    # -- the tree --------------------------------------------------------------------
    def build(self) -> None:
        self._proc_files()
        self._processes()
        self._net()
        self._cgroups()
        self._gpus()
        from guardian.testing import efa_tree
        efa_tree(self.root, EFAS)
        (self.root / "dev").mkdir(exist_ok=True)
        (self.root / "dev" / "kmsg").symlink_to("/dev/kmsg")
        self.advance()

    def _proc_files(self) -> None:
        for name in ("pressure/cpu", "pressure/io", "pressure/memory", "meminfo", "loadavg"):
            _write(self.proc / name, (RECORDED / name).read_text())
        _write(self.proc / "sys" / "kernel" / "random" / "boot_id",
               "0f2c8e5a-8a4b-4f3e-9d61-5b0b6c2f7a10\n")
        _write(self.proc / "sys" / "kernel" / "pid_max", "4194304\n")
        _write(self.proc / "sys" / "kernel" / "threads-max", "8253551\n")
        _write(self.proc / "uptime", "86400.00 16000000.00\n")
        _write(self.proc / "self" / "mountinfo",  # the cgroup2 line as a v2 node has it
               "25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
               "26 30 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
               "35 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - "
               "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
        _write(self.proc / "cgroups", "#subsys_name\thierarchy\tnum_cgroups\tenabled\n"
               + "".join(f"{c}\t0\t{MEMCGS + 1}\t1\n"
                         for c in ("cpuset", "cpu", "cpuacct", "blkio", "memory", "devices",
                                   "freezer", "net_cls", "perf_event", "hugetlb", "pids")))
        every = f"0-{CPUS - 1}"
        _write(self.sys / "devices" / "system" / "cpu" / "online", every + "\n")
        head = " " * 4 + "".join(f"{'CPU' + str(c):>11}" for c in range(CPUS))
        lines, irq = [], 100
        for nic, pci in zip(NIC_NAMES, NIC_PCI, strict=True):
            # ena_setup_mgmnt_intr() and ena_setup_io_intr() (ena_netdev.c)
            names = [f"ena-mgmnt@pci:{pci}", *(f"{nic}-Tx-Rx-{q}" for q in range(QUEUES))]
            for name in names:
                counts = " ".join(f"{(irq * 7 + c) % 5000:>10}" for c in range(CPUS))
                lines.append(f"{irq:>4}: {counts}  PCI-MSIX-{pci} {irq - 100}-edge  {name}")
                irq += 1
        _write(self.proc / "interrupts", head + "\n" + "\n".join(lines) + "\n")

    def _processes(self) -> None:
        pid = 1
        cgroups = self._pod_cgroups()
        for cpu in range(CPUS):  # kernel threads, as on every multi-core kernel
            for pattern in KTHREADS:
                pid += 1
                self._process(pid, pattern.format(cpu), 2, self.kthread_fields, "0::/\n")
        comms = itertools.cycle(("python3", "pt_data_worker", "containerd-shim", "pause",
                                 "bash", "sleep", "nccl-proxy", "fluent-bit", "sshd"))
        system = ("systemd", "kubelet", "containerd", "dcgm-exporter", "nvidia-persistenced",
                  "efa-device-plugin", "aws-k8s-agent", "kube-proxy", "chronyd",
                  "systemd-journald")
        self._process(1, "systemd", 0, self.user_fields, "0::/init.scope\n")
        for n in range(PROCESSES - 1):
            pid += 1
            comm = system[n] if n < len(system) else next(comms)
            cg = (f"0::/system.slice/{comm}.service\n" if n < len(system)
                  else f"0::{cgroups[n % len(cgroups)]}\n")
            self._process(pid, comm, 1, self.user_fields, cg)
            if n % (PROCESSES // BUSY) == 0:
                self.busy.append((pid, comm, cg))

    def _process(self, pid: int, comm: str, ppid: int, fields: list[str], cgroup: str,
                 stime: int = 0) -> None:
        f = list(fields)
        f[1] = str(ppid)  # ppid; state stays the recorded one's unless sleeping
        f[0] = "S"
        f[11], f[12] = str(5 * stime), str(stime)  # utime, stime
        # num_threads (field 20) and starttime (field 22), fs/proc/array.c do_task_stat
        f[17] = str(50 if comm == "python3" else 1 if fields is self.kthread_fields else 4)
        f[19] = str(1000 + pid)
        d = self.proc / str(pid)
        text = f"{pid} ({comm}) {' '.join(f)}\n"
        if d.is_dir():
            _replace(d / "stat", text)
            return
        _write(d / "stat", text)
        _write(d / "comm", comm + "\n")
        _write(d / "cgroup", cgroup)
        _write(d / "status", self.status.replace("prometheus", comm, 1)
               .replace("Pid:\t26231", f"Pid:\t{pid}").replace("PPid:\t1", f"PPid:\t{ppid}"))

    def _pod_cgroups(self) -> list[str]:
        """The cgroups of a Kubernetes node's pods: kubepods.slice, by QoS class, a slice
        per pod and a scope per container (the systemd cgroup driver's names)."""
        out = []
        for qos in ("burstable", "besteffort", "guaranteed"):
            base = "/kubepods.slice" + ("" if qos == "guaranteed"
                                        else f"/kubepods-{qos}.slice")
            for pod in range(200 if qos == "burstable" else 100 if qos == "besteffort" else 33):
                uid = f"{pod:08x}_{qos[:4]}_4f3e_9d61_5b0b6c2f7a10"
                prefix = "kubepods" if qos == "guaranteed" else f"kubepods-{qos}"
                slice_ = f"{base}/{prefix}-pod{uid}.slice"
                for c in range(5):
                    out.append(f"{slice_}/cri-containerd-{pod:032x}{c:032x}.scope")
        return out

    def _cgroups(self) -> None:
        top = self.sys / "fs" / "cgroup"
        _write(top / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
        _write(top / "cgroup.subtree_control", "cpuset cpu io memory hugetlb pids rdma\n")
        dirs = ["/init.scope", "/system.slice",
                *(f"/system.slice/{s}.service" for s in (
                    "kubelet", "containerd", "sshd", "chronyd", "systemd-journald",
                    "nvidia-persistenced", "nvidia-fabricmanager", "amazon-ssm-agent")),
                "/kubepods.slice"]
        seen = set(dirs)
        for cg in self._pod_cgroups():  # each parent before its children
            parts = cg.split("/")
            for d in ("/".join(parts[:i]) for i in range(3, len(parts) + 1)):
                if d not in seen:
                    seen.add(d)
                    dirs.append(d)
        made = dirs[:MEMCGS - 1]  # the root cgroup is the 2,000th
        below = dict.fromkeys(made, 0)  # each cgroup's descendants (its cgroup.stat)
        for d in made:
            parts = d.split("/")
            for i in range(2, len(parts)):
                below["/".join(parts[:i])] += 1
        for d in made:
            where = top / d.lstrip("/")
            where.mkdir(parents=True, exist_ok=True)
            for name in CGROUP_FILES:
                (where / name).touch()
            (where / "memory.current").write_text("104857600\n")
            (where / "cgroup.events").write_text("populated 1\nfrozen 0\n")
            # as the kernel shows them (cgroup_type_show, cgroup_stat_show): a domain
            # cgroup, its live descendants, the controllers a parent gives its children
            (where / "cgroup.type").write_text("domain\n")
            (where / "cgroup.stat").write_text(
                f"nr_descendants {below[d]}\nnr_dying_descendants 0\n")
            (where / "cgroup.subtree_control").write_text(
                "cpu io memory pids\n" if below[d] else "\n")
        _write(top / "cgroup.stat", f"nr_descendants {len(made)}\nnr_dying_descendants 0\n")
        self.memcgs = len(made) + 1

    def _net(self) -> None:
        sys_ = self.sys
        (sys_ / "bus" / "pci" / "drivers" / "ena").mkdir(parents=True)
        for nic, pci in zip(NIC_NAMES, NIC_PCI, strict=True):
            dev = sys_ / "devices" / "pci0000:00" / pci
            _write(dev / "vendor", "0x1d0f\n")
            (dev / "driver").symlink_to("../../../bus/pci/drivers/ena")
            net = dev / "net" / nic
            net.mkdir(parents=True)
            (net / "device").symlink_to(f"../../../{pci}")
            for q in range(QUEUES):
                (net / "queues" / f"rx-{q}").mkdir(parents=True)
                (net / "queues" / f"tx-{q}").mkdir(parents=True)
            _write(net / "operstate", "up\n")
            for q in range(QUEUES + 1):
                _write(dev / "msi_irqs" / str(100 + q), "msix\n")
            (sys_ / "class" / "net").mkdir(parents=True, exist_ok=True)
            (sys_ / "class" / "net" / nic).symlink_to(
                f"../../devices/pci0000:00/{pci}/net/{nic}")
        (sys_ / "devices" / "virtual" / "net" / "lo").mkdir(parents=True)
        (sys_ / "class" / "net" / "lo").symlink_to("../../devices/virtual/net/lo")

    def _gpus(self) -> None:
        for gpu in healthy_gpus()["gpus"]:
            pci = gpu["pci_bus_id"][4:].lower()  # NVML's bus id has 8 digits of domain, sysfs 4
            dev = self.sys / "bus" / "pci" / "devices" / pci
            _write(dev / "vendor", "0x10de\n")
            _write(dev / "class", "0x030200\n")  # 3D controller
            _write(dev / "device", "0x2330\n")  # H100 SXM5

    # -- the counters ----------------------------------------------------------------
    def advance(self) -> None:
        """One tick's worth of work on the node: every counter moves."""
        self.step += 1
        s = self.step
        rows = []
        for c in range(CPUS):
            base = [int(x) for x in self.cpu_rows[c % len(self.cpu_rows)]]
            # a training node: users busy, a little kernel and softirq time
            moved = [1000 * s, 0, 100 * s, 360 * s, 0, 5 * s, 35 * s, 0, 0, 0]
            rows.append([b + m for b, m in zip(base, moved, strict=False)])
        total = [sum(col) for col in zip(*rows, strict=True)]
        _replace(self.proc / "stat", "\n".join(
            ["cpu  " + " ".join(map(str, total)),
             *(f"cpu{c} " + " ".join(map(str, r)) for c, r in enumerate(rows)),
             *self.stat_rest]) + "\n")
        head = " " * 10 + "".join(f"{'CPU' + str(c):<11}" for c in range(CPUS))
        lines = [head]
        for name, counts in self.softirq_rows:
            per = [counts[c % len(counts)] + (3000 + c) * s for c in range(CPUS)]
            lines.append(f"{name + ':':>12}" + "".join(f"{v:>11}" for v in per))
        _replace(self.proc / "softirqs", "\n".join(lines) + "\n")
        row = self.softnet_row
        _replace(self.proc / "net" / "softnet_stat", "".join(
            " ".join(f"{v:08x}" for v in [row[0] + 45000 * s, row[1], row[2] + (s // 4),
                                           *row[3:12], c]) + "\n" for c in range(CPUS)))
        dev = ["Inter-|   Receive                                                |  Transmit",
               " face |bytes    packets errs drop fifo frame compressed multicast|bytes    "
               "packets errs drop fifo colls carrier compressed"]
        for i, nic in enumerate(["lo", *NIC_NAMES]):
            nb, np_ = (10 ** 9 + i) * s, (7 * 10 ** 5 + i) * s
            dev.append(f"{nic:>6}: {nb} {np_} 0 0 0 0 0 0 {nb} {np_} 0 0 0 0 0 0")
        _replace(self.proc / "net" / "dev", "\n".join(dev) + "\n")
        for n in range(EFAS):
            hw = self.sys / "class" / "infiniband" / f"efa_{n}" / "ports" / "1" / "hw_counters"
            for name, each in (("tx_bytes", 3 * 10 ** 10), ("rx_bytes", 3 * 10 ** 10),
                              ("tx_pkts", 4 * 10 ** 6), ("rx_pkts", 4 * 10 ** 6),
                              ("rdma_write_bytes", 2 * 10 ** 10)):
                _replace(hw / name, f"{each * s}\n")
        for pid, comm, cg in self.busy:
            self._process(pid, comm, 1, self.user_fields, cg, stime=30 * s)


# -- what a host root cannot hold ----------------------------------------------------------

def healthy_gpus() -> dict[str, Any]:
    """tests/fixtures/nvml/h100x8.json with every GPU answering as its healthy GPU 0 does
    (each keeps its UUID and PCI address), no Xid and none lost later."""
    rec: dict[str, Any] = json.loads(NVML_RECORDING.read_text())
    well = rec["gpus"][0]
    rec["gpus"] = [{**well,  # the lost GPU 3 has none recorded: placeholders of the shape
                    "uuid": g.get("uuid", f"GPU-0000000{i}-0000-4000-8000-00000000000{i}"),
                    "pci_bus_id": g.get("pci_bus_id", "00000000:8A:00.0")}
                   for i, g in enumerate(rec["gpus"])]
    rec["count"] = len(rec["gpus"])
    rec["events"], rec["later"] = [], {}
    return rec


class RecordedNvml:
    """pynvml as far as guardian.hostio.nvml reads it, answering from a recording in the
    format of tests/fixtures/nvml (the tests' tests/support/nvml_recorded.py reads the same
    format; a benchmark imports nothing of the tests): a key missing is NOT_SUPPORTED, an
    ``{"error": NAME}`` raises pynvml's own error. Healthy GPUs only: no events."""

    def __init__(self, rec: dict[str, Any]) -> None:
        import pynvml
        self.pynvml = pynvml
        self.gpus: list[dict[str, Any]] = rec["gpus"]
        self.driver = str(rec["driver_version"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pynvml, name)  # constants, NVMLError and its classes

    def _get(self, h: int, key: str) -> Any:
        value = self.gpus[h].get(key, {"error": "NOT_SUPPORTED"})
        if isinstance(value, dict) and set(value) == {"error"}:
            raise self.pynvml.NVMLError(getattr(self.pynvml, f"NVML_ERROR_{value['error']}"))
        return value

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._get(h, "uuid"))

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        from types import SimpleNamespace
        return SimpleNamespace(busId=str(self._get(h, "pci_bus_id")).encode())

    def nvmlDeviceGetTotalEccErrors(self, h: int, error: int, counter: int) -> int:
        p = self.pynvml
        e = "uncorrected" if error == p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        c = "aggregate" if counter == p.NVML_AGGREGATE_ECC else "volatile"
        return int(self._get(h, f"ecc.{e}.{c}"))

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        double = cause == self.pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        return list(self._get(h, f"retired_pages.{'double' if double else 'single'}_bit"))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return int(self._get(h, "retired_pages_pending"))

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._get(h, "remapped_rows")
        return corr, unc, pending, failure

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._get(h, "clocks_event_reasons"))

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return int(self._get(h, "pcie_replays"))

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._get(h, "temperature"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._get(h, "power_mw"))

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return int(self._get(h, "persistence_mode"))

    def _link(self, h: int, link: int) -> dict[str, int]:
        links = self._get(h, "nvlinks")
        if link >= len(links):
            raise self.pynvml.NVMLError(self.pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return dict(links[link])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return int(self._link(h, link)["state"])

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        names = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data"}
        return int(self._link(h, link)[names[counter]])

    def nvmlEventSetCreate(self) -> str:
        return "event set"

    def nvmlEventSetFree(self, s: str) -> None:
        pass

    def nvmlDeviceGetSupportedEventTypes(self, h: int) -> int:
        return int(self._get(h, "supported_events"))

    def nvmlDeviceRegisterEvents(self, h: int, types: int, s: str) -> None:
        pass

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> Any:
        raise self.pynvml.NVMLError(self.pynvml.NVML_ERROR_TIMEOUT)  # no event waiting


@contextlib.contextmanager
def standins() -> Iterator[None]:
    """NVML over the healthy recording and the four ENA NICs' ETHTOOL answers, in this
    process (see the module docstring); put back after."""
    import errno
    import struct

    import guardian.hostio.nvml
    import guardian.sources.ethtool
    from guardian.hostio.ethtool import ETHTOOL_GSTATS, parse_gstats
    from guardian.testing import ena_stat_names

    nvml: Any = guardian.hostio.nvml
    ethtool_source: Any = guardian.sources.ethtool
    rec = healthy_gpus()
    names = tuple(ena_stat_names(QUEUES))
    rates = [10 ** 6 if n.endswith(("_cnt", "_bytes")) else 0 for n in names]
    fixed = {i: 500_000 for i, n in enumerate(names) if n == "conntrack_allowance_available"}
    start = time.monotonic()

    def driver_info(sock: object, iface: str) -> tuple[str, int]:
        if iface not in NIC_NAMES:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return "ena", len(names)

    def stat_names(sock: object, iface: str, n: int) -> tuple[str, ...]:
        return names

    def stat_values(sock: object, iface: str, n: int) -> tuple[int, ...]:
        t = int(time.monotonic() - start)
        values = [fixed.get(i, r * t) for i, r in enumerate(rates)]
        buf = bytearray(8 + 8 * (n + 256))  # the reply as the kernel packs it
        struct.pack_into(f"II{n}Q", buf, 0, ETHTOOL_GSTATS, n, *values)
        return parse_gstats(bytes(buf))

    saved = (nvml.load, ethtool_source.driver_info, ethtool_source.stat_names,
             ethtool_source.stat_values)
    nvml.load = lambda: RecordedNvml(rec)
    ethtool_source.driver_info = driver_info
    ethtool_source.stat_names = stat_names
    ethtool_source.stat_values = stat_values
    try:
        yield
    finally:
        (nvml.load, ethtool_source.driver_info, ethtool_source.stat_names,
         ethtool_source.stat_values) = saved


# -- the daemon and node_exporter side by side ---------------------------------------------

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def _every(period: float, fn: Any, stop: threading.Event) -> threading.Thread:
    def loop() -> None:
        due = time.monotonic()
        while not stop.is_set():
            with contextlib.suppress(Exception):
                fn()
            due += period
            stop.wait(max(0.0, due - time.monotonic()))
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    proc.terminate()
    proc.wait(timeout=timeout)


def _tick_totals(page: str) -> tuple[float, float]:
    """(guardian_tick_seconds_sum, _count) from the daemon's metrics page."""
    got = dict(re.findall(r"^guardian_tick_seconds_(sum|count) (\S+)$", page, re.M))
    return float(got["sum"]), float(got["count"])


PEER_COLLECTORS = [*NODE_EXPORTER_COLLECTORS, "infiniband"]


def side_by_side(root: Path, node: P5Node, tmp: Path, minutes: int) -> dict[str, Any]:
    """Both on the tree for ``minutes`` after a warm-up; CPU per minute, RSS, ticks."""
    binary = node_exporter()
    port = _free_port()
    (tmp / "g.toml").write_text("")
    # the rules copied out of the checkout, as /etc/guardian/rules is on a node: the
    # daemon watches their directory, and in a shared checkout every test that reads
    # rules/ wakes its watcher (0.9 % of a core in a first run)
    rules = tmp / "rules"
    shutil.copytree(REPO / "rules", rules)
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "PYTHONDONTWRITEBYTECODE")}
    daemon = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "guardian", "run", "--dry-run",
         "--rules", str(rules), "--root", str(root), "--config", f"{tmp}/g.toml",
         "--interval", f"{int(TICK)}s", "--metrics-port", str(port),
         "--state", f"{tmp}/s.json", "--audit", f"{tmp}/a.jsonl"],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "stderr", "wb"), env=env)  # noqa: SIM115
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        stack.callback(_stop, daemon, 30)
        peer = None
        peer_url = ""
        if binary is not None:
            peer_port = _free_port()
            peer = subprocess.Popen(
                [str(binary), f"--web.listen-address=127.0.0.1:{peer_port}",
                 "--collector.disable-defaults",
                 *(f"--collector.{c}" for c in PEER_COLLECTORS),
                 f"--path.procfs={root}/proc", f"--path.sysfs={root}/sys",
                 f"--path.rootfs={root}"],
                stdout=subprocess.DEVNULL, stderr=open(tmp / "peer-stderr", "wb"))  # noqa: SIM115
            stack.callback(_stop, peer, 10)
            peer_url = f"http://127.0.0.1:{peer_port}/metrics"
        url = f"http://127.0.0.1:{port}/metrics"
        stack.callback(stop.set)
        time.sleep(5)
        if daemon.poll() is not None:
            raise RuntimeError(f"guardian exited: {(tmp / 'stderr').read_text()[-3000:]}")
        _every(TICK, node.advance, stop)
        _every(TICK, lambda: _scrape(url), stop)  # as Prometheus scrapes a DaemonSet
        if peer is not None:
            _every(TICK, lambda: _scrape(peer_url), stop)
        time.sleep(2 * TICK)  # the first ticks: imports done, rates have two samples
        ours, theirs, ticks = [cpu_seconds(daemon.pid)], [], [_tick_totals(_scrape(url))]
        theirs.append(cpu_seconds(peer.pid) if peer else 0.0)
        due = time.monotonic()
        for _ in range(minutes):
            due += 60
            time.sleep(max(0.0, due - time.monotonic()))
            ours.append(cpu_seconds(daemon.pid))
            theirs.append(cpu_seconds(peer.pid) if peer else 0.0)
            ticks.append(_tick_totals(_scrape(url)))
        if daemon.poll() is not None:
            raise RuntimeError(f"guardian exited: {(tmp / 'stderr').read_text()[-3000:]}")
        page = _scrape(url)
        rss, peer_rss = rss_mib(daemon.pid), rss_mib(peer.pid) if peer else None
        peer_page = _scrape(peer_url) if peer else ""
    per_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(ours)]
    peer_min = [100 * (b - a) / 60 for a, b in itertools.pairwise(theirs)]
    (s0, c0), (s1, c1) = ticks[1], ticks[-1]
    return {"ours": statistics.median(per_min[1:]), "per_minute": per_min,
            "peer": statistics.median(peer_min[1:]) if peer else None,
            "peer_per_minute": peer_min, "rss": rss, "peer_rss": peer_rss,
            "tick_ms": 1000 * (s1 - s0) / max(c1 - c0, 1), "ticks": int(c1 - c0),
            "total_ticks": int(c1), "peer_scrape_ms": 1000 * sum(map(float, re.findall(
                r"^node_scrape_collector_duration_seconds\{[^}]*\} (\S+)", peer_page, re.M))),
            "blind": re.findall(r"^guardian_rule_blind\{[^}]*rule=\"([^\"]+)\"[^}]*\} 1", page,
                                re.M),
            "up": dict(re.findall(r"^guardian_source_up\{source=\"([^\"]+)\"\} (\S+)", page,
                                  re.M)),
            "peer_failed": re.findall(r"^node_scrape_collector_success\{collector=\"([^\"]+)\"\}"
                                      r" 0", peer_page, re.M)}


# -- the tick taken apart, and the history at full windows -----------------------------

def _timed(src: Any, spent: dict[str, list[float]]) -> None:
    """Wrap ``src.collect`` to add the CPU each call takes to ``spent[src.name]``."""
    inner = src.collect

    def collect(now: float) -> dict[str, object]:
        t0 = time.thread_time()
        try:
            out: dict[str, object] = inner(now)
            return out
        finally:
            spent.setdefault(src.name, []).append(time.thread_time() - t0)
    src.collect = collect


def tick_apart(node: P5Node, ticks: int, rounds: int = 8) -> dict[str, Any]:
    """In this process, over the same tree and stand-ins: the CPU of each source's
    collect() and of the engine's evaluation (shipped rules), medians of ``rounds`` ticks
    15 s apart; then the engine fed on, tick by tick, until its longest window (24 h) is
    full, with this process's RSS after ``ticks`` ticks (as many as the daemon had) and at
    the end."""
    from guardian.core.snapshot import Snapshot
    from guardian.engine.engine import Engine
    from guardian.hostio.host import Host
    from guardian.plugin.registry import default_registry
    from guardian.policy.loader import load_rules
    from guardian.runtime.collector import Collector

    with standins():
        coll = Collector.from_registry(Host(node.root), default_registry())
        spent: dict[str, list[float]] = {}
        for src in coll.sources:
            _timed(src, spent)
        engine = Engine(load_rules([REPO / "rules"]))
        collect, evaluate, snaps = [], [], []
        for k in range(rounds + 2):
            node.advance()
            t0 = time.thread_time()
            snap = coll.collect(k * TICK)
            t1 = time.thread_time()
            engine.evaluate(snap)
            t2 = time.thread_time()
            if k >= 2:  # rates have their two samples
                collect.append(t1 - t0)
                evaluate.append(t2 - t1)
            snaps.append(snap)
        coll.close()
    per_source = {n: 1000 * statistics.median(v[2:]) for n, v in spent.items()}
    # on from the last two real snapshots, every value moving by their difference
    a, b = snaps[-2].values, snaps[-1].values
    plan: list[tuple[str, Any, Any, Any]] = []
    for name, vb in b.items():
        va = a.get(name)
        if isinstance(vb, dict) and isinstance(va, dict):
            keys = list(vb)
            plan.append((name, keys, [vb[k] for k in keys],
                         [vb[k] - va.get(k, vb[k]) for k in keys]))
        elif isinstance(vb, int | float) and isinstance(va, int | float):
            plan.append((name, None, vb, vb - va))
        else:
            plan.append((name, None, vb, None))
    full = int(24 * 3600 / TICK) + 2
    rss_at: dict[str, float] = {}
    late: list[float] = []
    start = len(snaps)
    for k in range(1, full + 1):
        values: dict[str, Any] = {}
        for name, keys, base, step in plan:
            if keys is not None:
                values[name] = dict(zip(keys, [x + k * d for x, d in zip(base, step,
                                                                          strict=True)],
                                        strict=True))
            else:
                values[name] = base if step is None else base + k * step
        t0 = time.thread_time()
        engine.evaluate(Snapshot(time=(start + k) * TICK, values=values, checked=True))
        if k > full - 20:
            late.append(time.thread_time() - t0)
        if start + k == ticks:
            rss_at["daemon's ticks"] = rss_mib(os.getpid())
    rss_at["24 h"] = rss_mib(os.getpid())
    return {"collect_ms": 1000 * statistics.median(collect),
            "evaluate_ms": 1000 * statistics.median(evaluate),
            "evaluate_full_ms": 1000 * statistics.median(late),
            "per_source": per_source, "rss": rss_at, "full_ticks": start + full}


def main_guardian(argv: list[str]) -> int:
    """guardian's CLI with the stand-ins in place (the bench's daemon)."""
    with standins():
        from guardian.cli import main
        return main(argv)


def run() -> Iterator[dict[str, Any]]:
    minutes = int(os.environ.get("GUARDIAN_BENCH_P5_MINUTES", "5"))
    with tempfile.TemporaryDirectory(prefix="guardian-p5-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        node = P5Node(root)
        node.build()
        before = os.getloadavg()[0]
        r = side_by_side(root, node, Path(tmp), minutes)
        after = os.getloadavg()[0]
        apart = tick_apart(node, r["total_ticks"])
    shape = (f"{CPUS} CPUs, {GPUS} GPUs (NVML stand-in), {EFAS} EFA devices, {NICS} ENA NICs "
             f"x {QUEUES} queues (ETHTOOL stand-in), {PROCESSES:,} processes + "
             f"{CPUS * len(KTHREADS)} kernel threads, {node.memcgs:,} memcgs (cgroup2)")
    run_how = (f"guardian run (shipped rules, dry run, {int(TICK)} s tick, --root on the "
               f"tree; {shape}) and node_exporter ({', '.join(PEER_COLLECTORS)}; "
               f"--path.procfs/sysfs/rootfs on the tree) side by side, both scraped every "
               f"{int(TICK)} s, the tree's counters moved every {int(TICK)} s; whole process "
               f"(threads, children) per minute from /proc/<pid>/stat, median of minutes 2-"
               f"{len(r['per_minute'])} (ours {[round(m, 3) for m in r['per_minute']]}, "
               f"node_exporter {[round(m, 3) for m in r['peer_per_minute']]}); load average "
               f"before {before:.2f}, after {after:.2f}; rules blind: {len(r['blind'])}; "
               f"node_exporter collectors failing: {r['peer_failed'] or 'none'}")
    peer = "node_exporter, same tree, scraped every 15 s" if r["peer"] is not None else ""
    yield figure("p5: daemon CPU at a 15 s tick", r["ours"], "% of a core", run_how, peer,
                 r["peer"], target="≤ 1 % (NPD's DaemonSet limit: 10m)", digits=3)
    yield figure("p5: daemon RSS at the end", r["rss"], "MiB", "VmRSS after the run",
                 "node_exporter" if r["peer_rss"] else "", r["peer_rss"],
                 target="≤ 80 MiB (NPD's limit: 80Mi)", digits=1)
    grown = apart["rss"]["24 h"] - apart["rss"].get("daemon's ticks", apart["rss"]["24 h"])
    yield figure("p5: daemon RSS with its 24 h windows full (projected)", r["rss"] + grown,
                 "MiB", f"the run's VmRSS plus what the engine's history grew by in this "
                 f"process between {r['total_ticks']} ticks and {apart['full_ticks']} (24 h at "
                 f"15 s, the longest window of the shipped rules): +{grown:.1f} MiB, every "
                 f"value moving on from the last two real snapshots",
                 target="≤ 80 MiB", digits=1)
    yield figure("p5: one tick (guardian_tick_seconds)", r["tick_ms"], "ms",
                 f"the daemon's own histogram: sum/count over minutes 2-"
                 f"{len(r['per_minute'])} ({r['ticks']} ticks; wall time: collect, evaluate, "
                 "metrics, state)", "node_exporter's scrape (its collectors' durations)"
                 if r["peer"] is not None else "", r["peer_scrape_ms"] or None, digits=1)
    parts = ", ".join(f"{n} {ms:.2f}" for n, ms in
                      sorted(apart["per_source"].items(), key=lambda kv: -kv[1]))
    yield figure("p5: collect(), in process", apart["collect_ms"], "ms CPU",
                 f"every default source through the collector (values checked), median of 8 "
                 f"ticks; by source (ms): {parts}", digits=1)
    yield figure("p5: evaluate the shipped rules", apart["evaluate_ms"], "ms CPU",
                 "median of 8 ticks, windows nearly empty", "with 24 h windows full",
                 apart["evaluate_full_ms"], digits=2)


if __name__ == "__main__":
    if sys.argv[1:2] == ["guardian"]:
        raise SystemExit(main_guardian(sys.argv[2:]))
    for f in run():
        print(json.dumps(f))
