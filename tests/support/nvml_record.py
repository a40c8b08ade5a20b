"""Record a real node's NVML answers for tests/fixtures/nvml/ (the format
tests/support/nvml_recorded.py replays): run on a node with NVIDIA GPUs and the driver,

    python -m tests.support.nvml_record --seconds 60 > tests/fixtures/nvml/NAME.json

Read-only: it calls only NVML's getters and the event set's wait, never a reset, a
setter or a clear of any counter. Each answer is what pynvml returned, or ``{"error":
NAME}`` for the NVMLError it raised; Xid events are gathered for ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import pynvml

N = pynvml


def _error(exc: Any) -> dict[str, str]:
    names = [k for k in dir(pynvml) if k.startswith("NVML_ERROR_")
             and getattr(pynvml, k) == exc.value]
    return {"error": names[0][len("NVML_ERROR_"):] if names else str(exc.value)}


def _ask(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except N.NVMLError as exc:
        return _error(exc)


def _gpu(index: int) -> tuple[dict[str, Any], Any]:
    got: dict[str, Any] = {"handle": None}
    try:
        h = N.nvmlDeviceGetHandleByIndex(index)
    except N.NVMLError as exc:
        got["handle"] = _error(exc)
        return got, None
    pci = _ask(N.nvmlDeviceGetPciInfo, h)
    got["uuid"] = _ask(N.nvmlDeviceGetUUID, h)
    got["pci_bus_id"] = pci if isinstance(pci, dict) else pci.busId.decode()
    for e, et in (("corrected", N.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                  ("uncorrected", N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        for c, ct in (("volatile", N.NVML_VOLATILE_ECC), ("aggregate", N.NVML_AGGREGATE_ECC)):
            got[f"ecc.{e}.{c}"] = _ask(N.nvmlDeviceGetTotalEccErrors, h, et, ct)
    got["retired_pages.single_bit"] = _ask(
        N.nvmlDeviceGetRetiredPages, h, N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    got["retired_pages.double_bit"] = _ask(
        N.nvmlDeviceGetRetiredPages, h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    got["retired_pages_pending"] = _ask(N.nvmlDeviceGetRetiredPagesPendingStatus, h)
    rows = _ask(N.nvmlDeviceGetRemappedRows, h)
    got["remapped_rows"] = list(rows) if isinstance(rows, tuple) else rows
    got["clocks_event_reasons"] = _ask(N.nvmlDeviceGetCurrentClocksEventReasons, h)
    got["pcie_replays"] = _ask(N.nvmlDeviceGetPcieReplayCounter, h)
    got["temperature"] = _ask(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU)
    got["power_mw"] = _ask(N.nvmlDeviceGetPowerUsage, h)
    got["persistence_mode"] = _ask(N.nvmlDeviceGetPersistenceMode, h)
    links: list[Any] = []
    for link in range(N.NVML_NVLINK_MAX_LINKS):
        state = _ask(N.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(state, dict):
            if link == 0 and state["error"] != "INVALID_ARGUMENT":
                got["nvlinks"] = state  # no NVLink at all: the GPU's whole answer
                links = []
            break
        entry = {"state": state}
        for name, counter in (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3)):
            entry[name] = _ask(N.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
        links.append(entry)
    got.setdefault("nvlinks", links)
    got["supported_events"] = _ask(N.nvmlDeviceGetSupportedEventTypes, h)
    procs = _ask(N.nvmlDeviceGetComputeRunningProcesses, h)
    got["processes.compute"] = [p.pid for p in procs] if isinstance(procs, list) else procs
    procs = _ask(N.nvmlDeviceGetGraphicsRunningProcesses, h)
    got["processes.graphics"] = [p.pid for p in procs] if isinstance(procs, list) else procs
    got["display_active"] = _ask(N.nvmlDeviceGetDisplayActive, h)
    got["display_mode"] = _ask(N.nvmlDeviceGetDisplayMode, h)
    got["mig_mode"] = _ask(N.nvmlDeviceGetMigMode, h)
    got["architecture"] = _ask(N.nvmlDeviceGetArchitecture, h)
    return got, h


def record(seconds: float) -> dict[str, Any]:
    """One read of every GPU, then the Xid events of ``seconds``."""
    try:
        N.nvmlInit()
    except N.NVMLError as exc:
        return {"about": "nvmlInit failed", "init": _error(exc)["error"]}
    try:
        count = N.nvmlDeviceGetCount()
        gpus, handles = [], {}
        for i in range(count):
            got, h = _gpu(i)
            gpus.append(got)
            if h is not None:
                handles[i] = h
        events: list[list[int]] = []
        es = N.nvmlEventSetCreate()
        keys = {}
        for i, h in handles.items():
            if not isinstance(_ask(N.nvmlDeviceRegisterEvents, h,
                                   N.nvmlEventTypeXidCriticalError, es), dict):
                keys[N.nvmlDeviceGetPciInfo(h).busId] = i
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            try:
                data = N.nvmlEventSetWait_v2(es, 1000)
            except N.NVMLError_Timeout:
                continue
            bus = N.nvmlDeviceGetPciInfo(data.device).busId
            events.append([keys.get(bus, -1), int(data.eventData)])
        N.nvmlEventSetFree(es)
        return {"about": f"recorded by tests/support/nvml_record.py on {time.strftime('%F')}",
                "init": None, "driver_version": N.nvmlSystemGetDriverVersion(),
                "count": count, "gpus": gpus, "events": events}
    finally:
        N.nvmlShutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="how long to gather Xid events")
    json.dump(record(ap.parse_args().seconds), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
