"""NVIDIA GPUs read natively through NVML (NVIDIA's ``nvidia-ml-py`` binding; the calls in
:mod:`guardian.hostio.nvml`): per GPU, by its index, UUID and PCI bus id (dcgm-exporter's
label names ``gpu``, ``UUID`` and ``pci_bus_id``, so a rule or a dashboard can join the
two), ECC error counts (volatile: since the driver loaded; aggregate: the GPU's life),
retired pages and their pending retirement, remapped rows and a remap pending or failed,
clocks event (throttle) reasons, NVLink DL error counters per active link (``link``), PCIe
replays, temperature, power, persistence mode, whether NVML says the GPU is lost
(``GPU_IS_LOST``: fallen off the bus), and Xid events, taken from an NVML event set with a
0 ms wait each tick (the loop never blocks on it), by code and by the action NVIDIA's
catalog gives it (guardian/data/xid.toml), and by GPU and action: ``nvml.xid_by_gpu`` has
every action of every GPU from the read that first lists the GPU, at 0, so a GPU's first
Xid is a rise a rule's ``increase`` sees (a counter member that appears with its first
event has no earlier sample to rise from); an Xid taken at the read that first lists its
GPU, or of a GPU NVML does not list, counts there from the next read.

It complements dcgm-exporter's page (read by the exposition source, rules/gpu-dcgm.toml):
it needs no exporter, and says what the driver says of a GPU it cannot read.

Nothing is ever 0 or ok for want of a reading: a value NVML refuses is absent (no value)
for that GPU, and the refusal is a fault of the source with NVML's own name for it
(``GPU 3: ecc uncorrected volatile: NVML GPU_IS_LOST``), counted in
``guardian.source_errors``; a field the GPU does not have (``NOT_SUPPORTED``: retired pages
on GPUs that remap rows, NVLink on a PCIe card) is absent and no fault. Without the
library or the driver the source does not run and says why once (``guardian signals``,
/healthz): rules over it are blind, never ok. A library not found is said with the GPUs
the PCI bus has and where it is missing (:mod:`guardian.hostio.gpuhost`): in a pod
without the NVIDIA container runtime, the container, never "no GPU". With ``gpus =
"auto"`` (the default) a node whose PCI bus has no NVIDIA display controller has nothing
for it to read.

While ``gpu.reset`` runs ``nvidia-smi --gpu-reset``, the source's NVML session is shut
down (nvidia-smi counts a process holding the GPU through NVML as a user that blocks the
reset; :class:`guardian.hostio.nvml.Sessions`): its signals have no value, its error says
``NVML released for a GPU reset of 0000:3a:00.0``, and Xid events of that time are not
seen through NVML (the kernel log's ``NVRM: Xid`` lines still are). Its next collect after
the reset, succeeded or not, opens NVML anew.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.core.xid import ACTION_NAMES, action_of
from guardian.hostio.gpuhost import library_missing
from guardian.hostio.host import Host
from guardian.hostio.nvidiadev import cgroup_refusal
from guardian.hostio.nvml import (
    EVENT_REASONS,
    GpuReading,
    Nvml,
    NvmlReleased,
    NvmlUnavailable,
)
from guardian.hostio.pci import pci_gpus
from guardian.plugin.contract import Source

log = logging.getLogger("guardian.sources.gpu")

GPU = ("gpu", "UUID", "pci_bus_id")


class GpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: Literal["auto", "expected"] = Field(
        "auto", description="auto: read where the PCI bus has an NVIDIA display controller "
        "(elsewhere the source has nothing to read); expected: this node has NVIDIA GPUs, so "
        "a missing driver or library is a fault")


def _spec(name: str, help: str, unit: str = "", extra: tuple[str, ...] = (),
          counter: bool = False) -> SignalSpec:
    return SignalSpec(name, help, unit, labels=(*GPU, *extra), counter=counter)


# (signal, reading field, extra labels) of the plain per-GPU values
_FIELDS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "nvml.ecc_errors": [(f"ecc.{e}.{c}", {"error": e, "counter": c})
                        for e in ("corrected", "uncorrected")
                        for c in ("volatile", "aggregate")],
    "nvml.retired_pages": [("retired_pages.single_bit", {"cause": "single_bit"}),
                           ("retired_pages.double_bit", {"cause": "double_bit"})],
    "nvml.retired_pages_pending": [("retired_pages.pending", {})],
    "nvml.remapped_rows": [("remapped_rows.correctable", {"cause": "correctable"}),
                           ("remapped_rows.uncorrectable", {"cause": "uncorrectable"})],
    "nvml.remap_pending": [("remap.pending", {})],
    "nvml.remap_failed": [("remap.failed", {})],
    "nvml.clocks_event_reasons": [("clocks_event_reasons", {})],
    "nvml.nvlink_errors": [(f"nvlink.{c}", {"counter": c})
                           for c in ("replay", "recovery", "crc_flit", "crc_data")],
    "nvml.nvlinks_active": [("nvlink.active", {})],
    "nvml.pcie_replays": [("pcie_replays", {})],
    "nvml.temperature_celsius": [("temperature", {})],
    "nvml.power_watts": [("power_watts", {})],
    "nvml.persistence_mode": [("persistence_mode", {})],
}


class GpuSource(Source[GpuConfig]):
    """NVIDIA GPUs through NVML (see the module docstring)."""

    name: ClassVar[str] = "gpu"
    Config = GpuConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("nvml.gpus", "GPUs NVML counts (nvmlDeviceGetCount)", "GPUs"),
        _spec("nvml.gpu_lost", "1 when NVML answers GPU_IS_LOST for the GPU (fallen off "
              "the bus: gone until a reset or a reboot), 0 when it answers; no member when "
              "it could not be asked"),
        _spec("nvml.ecc_errors", "ECC errors by error (corrected, uncorrected) and counter "
              "(volatile: since the driver loaded; aggregate: over the GPU's life)",
              "errors", ("error", "counter"), counter=True),
        _spec("nvml.retired_pages", "framebuffer pages retired, by cause (single_bit: "
              "multiple single-bit ECC errors; double_bit)", "pages", ("cause",),
              counter=True),
        _spec("nvml.retired_pages_pending", "1 while a page retirement waits for the "
              "driver to reload (a GPU reset)"),
        _spec("nvml.remapped_rows", "rows remapped, by cause (correctable, uncorrectable "
              "errors)", "rows", ("cause",), counter=True),
        _spec("nvml.remap_pending", "1 while a row remap waits for a GPU reset"),
        _spec("nvml.remap_failed", "1 when a row could not be remapped (the GPU needs "
              "replacing)"),
        _spec("nvml.clocks_event_reasons", "the clocks event (throttle) reasons bitmask: "
              "0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake "
              "(nvml.h nvmlClocksEventReason*)"),
        _spec("nvml.nvlink_errors", "NVLink DL error counters of each active link "
              "(nvmlDeviceGetNvLinkErrorCounter), by link and counter (replay, recovery, "
              "crc_flit, crc_data); no member for a link that is not active", "errors",
              ("link", "counter"), counter=True),
        _spec("nvml.nvlinks_active", "NVLinks of the GPU that are active", "links"),
        _spec("nvml.pcie_replays", "PCIe replays (the link retransmitted)", "replays",
              counter=True),
        _spec("nvml.temperature_celsius", "GPU core temperature", "celsius"),
        _spec("nvml.power_watts", "power drawn by the GPU board", "watts"),
        _spec("nvml.persistence_mode", "1 when persistence mode is on"),
        _spec("nvml.xid", "Xid events since start (NVML's event set), by GPU, code and the "
              f"action NVIDIA's catalog gives it ({', '.join(ACTION_NAMES)}); a member "
              "appears with its first event", "errors", ("code", "action"), counter=True),
        _spec("nvml.xid_by_gpu", "Xid events since start by GPU and the action NVIDIA's "
              "catalog gives them (every action of every GPU present at 0 from the read "
              "that first lists the GPU, so a GPU's first Xid is an increase)", "errors",
              ("action",), counter=True),
        SignalSpec("nvml.xid_by_action", "Xid events since start by the action NVIDIA's "
                   "catalog gives them (every action present from the start, so the first "
                   "Xid is an increase)", "errors", labels=("action",), counter=True),
    )

    def __init__(self, host: Host, config: GpuConfig | None = None,
                 reader: Callable[[], Nvml] = Nvml) -> None:
        super().__init__(host, config)
        self.cfg: GpuConfig = self.config
        self.reader = reader
        self.nvml: Nvml | None = None
        self.xids: dict[Labels, float] = {}
        self.by_action: dict[str, float] = dict.fromkeys(ACTION_NAMES, 0.0)
        self.by_gpu: dict[Labels, float] = {}
        self.owed: dict[Labels, float] = {}  # Xids of by_gpu members new at the last read
        self._faults: list[str] = []
        self.failing: set[str] = set()

    def unconfigured(self) -> str | None:
        if self.cfg.gpus == "auto" and not pci_gpus(self.host.sys):
            return ('gpus = "auto" and no NVIDIA GPU on this node\'s PCI bus (vendor '
                    '0x10de, class 0x03)')
        return None

    def unavailable(self) -> str | None:
        try:
            self._open()
        except NvmlUnavailable as exc:
            if exc.error == "LIBRARY_NOT_FOUND":  # the node's GPUs, and where it is missing
                return library_missing(self.host)
            refused = "" if isinstance(exc, NvmlReleased) else cgroup_refusal(self.host.root)
            if refused:  # NVML says "Unknown Error"; the PCI bus and the cgroup say more
                gpus = pci_gpus(self.host.sys)
                on_bus = f"{len(gpus)} NVIDIA GPU(s) on the PCI bus ({_few_text(gpus)}), " \
                    "but " if gpus else ""
                return f"{exc}: {on_bus}{refused}"
            return str(exc)
        return None

    def _open(self) -> Nvml:
        if self.nvml is None:
            nvml = self.reader()
            nvml.start()
            self.nvml = nvml
        return self.nvml

    def collect(self, now: float) -> dict[str, object]:
        reading = self._open().read()
        out: dict[str, Family] = {spec.name: {} for spec in self.specs
                                  if spec.is_family and spec.name != "nvml.xid_by_action"}
        for member, n in self.owed.items():  # each member had its 0 at the last read
            self.by_gpu[member] += n
        self.owed = {}
        for g in reading.gpus:
            base = _labels(g)
            if g.lost is not None:
                out["nvml.gpu_lost"][labels_of(base)] = 1.0 if g.lost else 0.0
            for signal, fields in _FIELDS.items():
                for key, extra in fields:
                    if key in g.values:
                        out[signal][labels_of({**base, **extra})] = g.values[key]
            for link, counters in g.nvlinks.items():
                for name, value in counters.items():
                    out["nvml.nvlink_errors"][labels_of(
                        {**base, "link": str(link), "counter": name})] = value
        before = set(self.by_gpu)
        by_index = {g.index: _labels(g) for g in reading.gpus}
        for base in by_index.values():
            for action in ACTION_NAMES:
                self.by_gpu.setdefault(labels_of({**base, "action": action}), 0.0)
        for index, code in reading.xids:
            action = action_of(code)
            base = by_index.get(index, {"gpu": str(index) if index >= 0 else "",
                                        "UUID": "", "pci_bus_id": ""})
            member = labels_of({**base, "code": str(code), "action": action})
            self.xids[member] = self.xids.get(member, 0.0) + 1
            self.by_action[action] += 1
            per_gpu = labels_of({**base, "action": action})
            if per_gpu in before:
                self.by_gpu[per_gpu] += 1
            else:  # published at 0 now, counted from the next read: a rise rules see
                self.by_gpu.setdefault(per_gpu, 0.0)
                self.owed[per_gpu] = self.owed.get(per_gpu, 0.0) + 1
            log.warning("gpu: Xid %d on GPU %s (%s): NVIDIA's catalog says %s", code,
                        base["gpu"], base["pci_bus_id"] or "unknown PCI address", action)
        out["nvml.xid"] = dict(self.xids)
        out["nvml.xid_by_gpu"] = dict(self.by_gpu)
        self._report(reading.failures, reading.gpus)
        return {"nvml.gpus": float(reading.count), **out,
                "nvml.xid_by_action": {labels_of({"action": a}): n
                                       for a, n in self.by_action.items()}}

    def _report(self, failures: list[Any], gpus: list[GpuReading]) -> None:
        """One fault per GPU (and one for the node's own reads), naming NVML's errors and
        what each refused; logged when it starts and when it ends."""
        faults: dict[str, str] = {}
        if failures:
            faults["node"] = "; ".join(str(f) for f in failures)
        for g in gpus:
            if not g.failures:
                continue
            by_error: dict[str, list[str]] = {}
            for f in g.failures:
                by_error.setdefault(f.error, []).append(f.what)
            where = f"GPU {g.index}" + (f" ({g.pci_bus_id})" if g.pci_bus_id else "")
            faults[where] = f"{where}: " + "; ".join(
                f"NVML {err}: {', '.join(_few(whats))}" for err, whats in by_error.items())
        self._faults = list(faults.values())
        for k in sorted(faults.keys() - self.failing):
            log.warning("gpu: %s", faults[k])
        for k in sorted(self.failing - faults.keys()):
            log.info("gpu: %s is read again", k)
        self.failing = set(faults)

    def faults(self) -> list[str]:
        return list(self._faults)

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None


def _labels(g: GpuReading) -> dict[str, str]:
    return {"gpu": str(g.index), "UUID": g.uuid, "pci_bus_id": g.pci_bus_id}


def _few(whats: list[str], most: int = 4) -> list[str]:
    return whats if len(whats) <= most else [*whats[:most], f"+{len(whats) - most} more"]


def _few_text(items: list[str]) -> str:
    return ", ".join(_few(items))


def reasons_text(mask: int) -> str:
    """The clocks event reasons of a bitmask, in NVML's names."""
    return ", ".join(name for bit, name in EVENT_REASONS.items() if mask & bit) or "none"
