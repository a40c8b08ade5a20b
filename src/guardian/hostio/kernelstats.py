"""The kernel's system-wide counters as /proc prints them: per-CPU times (/proc/stat),
softirqs per CPU (/proc/softirqs), the softnet backlog (/proc/net/softnet_stat), interface
counters (/proc/net/dev) and pressure stall information (/proc/pressure/*). Each parser
takes a file's text and raises ValueError on a layout it does not know."""

from __future__ import annotations

COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat_cpus(text: str) -> dict[str, tuple[int, ...]]:
    """Per-core tick counters from /proc/stat (the aggregate ``cpu`` line excluded)."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            parts = line.split()
            if len(parts) < 1 + len(COLUMNS):
                raise ValueError(f"/proc/stat line {parts[0]!r} has {len(parts) - 1} "
                                 f"columns, expected at least {len(COLUMNS)}")
            out[parts[0][3:]] = tuple(int(x) for x in parts[1:1 + len(COLUMNS)])
    if not out:
        raise ValueError("no cpuN lines in /proc/stat")
    return out


SOFTNET_COLUMNS = {0: "processed", 1: "dropped", 2: "time_squeeze"}


NET_DEV = {"rx_bytes": 0, "rx_packets": 1, "rx_errors": 2, "rx_dropped": 3,
           "tx_bytes": 8, "tx_packets": 9, "tx_errors": 10, "tx_dropped": 11}


def parse_softirqs(text: str) -> dict[str, dict[str, int]]:
    """Rows of /proc/softirqs: name -> cpu -> count."""
    lines = text.splitlines()
    if not lines or not lines[0].split() or not all(
            c.startswith("CPU") for c in lines[0].split()):
        raise ValueError("/proc/softirqs: no CPU header line")
    cpus = [c[3:] for c in lines[0].split()]
    out: dict[str, dict[str, int]] = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        vals = rest.split()
        if not sep or len(vals) != len(cpus):
            raise ValueError(f"/proc/softirqs row {name.strip()!r} has {len(vals)} values "
                             f"for {len(cpus)} CPUs")
        out[name.strip()] = {cpu: int(v) for cpu, v in zip(cpus, vals, strict=True)}
    if "NET_RX" not in out or "NET_TX" not in out:
        raise ValueError("/proc/softirqs has no NET_RX or NET_TX row")
    return out


def parse_softnet_stat(text: str) -> dict[str, dict[str, int]]:
    """Rows of /proc/net/softnet_stat (hex): column -> cpu -> count. Older kernels have
    fewer columns and no CPU id; then the row number is the CPU."""
    out: dict[str, dict[str, int]] = {c: {} for c in SOFTNET_COLUMNS.values()}
    for row, line in enumerate(text.split("\n")):
        cols = line.split()
        if not cols:
            continue
        if len(cols) < 9:
            raise ValueError(f"softnet_stat row {row} has {len(cols)} columns, expected 9+")
        cpu = str(int(cols[12], 16)) if len(cols) >= 13 else str(row)
        for idx, name in SOFTNET_COLUMNS.items():
            out[name][cpu] = int(cols[idx], 16)
    if not out["processed"]:
        raise ValueError("/proc/net/softnet_stat has no rows")
    return out


def parse_net_dev(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/dev: counter -> interface -> value."""
    out: dict[str, dict[str, int]] = {k: {} for k in NET_DEV}
    lines = text.splitlines()
    if len(lines) < 2 or "|" not in lines[0]:
        raise ValueError("/proc/net/dev: no header")
    for line in lines[2:]:
        iface, sep, rest = line.partition(":")
        vals = rest.split()
        if not sep or len(vals) != 16:
            raise ValueError(f"/proc/net/dev row {iface.strip()!r} has {len(vals)} columns, "
                             "expected 16")
        for name, idx in NET_DEV.items():
            out[name][iface.strip()] = int(vals[idx])
    return out


KINDS = ("some", "full")


def parse_pressure(text: str) -> dict[str, float]:
    """``some avg10=0.00 avg60=0.00 avg300=0.00 total=123`` -> {"some_avg10": 0.0, ...}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, *fields = line.split() or [""]
        if kind not in KINDS or len(fields) != 4:
            raise ValueError(f"bad pressure line {line!r}")
        for f in fields:
            k, _, v = f.partition("=")
            if k not in ("avg10", "avg60", "avg300", "total"):
                raise ValueError(f"bad pressure field {f!r}")
            out[f"{kind}_{k}"] = float(v)
    if "some_total" not in out:
        raise ValueError("pressure file has no 'some' line")
    return out

