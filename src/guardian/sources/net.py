"""Softirq and network counters: /proc/softirqs NET_RX/NET_TX per CPU,
/proc/net/softnet_stat per CPU, /proc/net/dev per interface. These are counters (rules
take ``rate()`` or ``increase()`` of them); NET_RX/NET_TX also come as per-second rates
between the last two collections."""

from __future__ import annotations

from typing import ClassVar

from guardian.core.snapshot import Family, SignalSpec
from guardian.core.snapshot import label as label_of
from guardian.hostio.host import Host, exists, read_kernel_file
from guardian.hostio.kernelstats import NET_DEV, parse_net_dev, parse_softirqs, parse_softnet_stat
from guardian.plugin.contract import NoParams, Source


def _family(name: str, values: dict[str, int]) -> Family:
    return {label_of(name, k): float(v) for k, v in values.items()}


class NetSource(Source[NoParams]):
    name: ClassVar[str] = "net"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("softirq.net_rx", "NET_RX softirqs handled per CPU", "softirqs",
                   labels=("cpu",), counter=True),
        SignalSpec("softirq.net_tx", "NET_TX softirqs handled per CPU", "softirqs",
                   labels=("cpu",), counter=True),
        SignalSpec("softirq.net_rx_per_second", "NET_RX softirqs per second per CPU, "
                   "since the previous collection", "softirqs/s", labels=("cpu",)),
        SignalSpec("softirq.net_tx_per_second", "NET_TX softirqs per second per CPU, "
                   "since the previous collection", "softirqs/s", labels=("cpu",)),
        SignalSpec("softnet.processed", "packets processed per CPU", "packets",
                   labels=("cpu",), counter=True),
        SignalSpec("softnet.dropped", "packets dropped per CPU (backlog full)", "packets",
                   labels=("cpu",), counter=True),
        SignalSpec("softnet.time_squeeze", "NAPI polls that ran out of budget or time per "
                   "CPU", "events", labels=("cpu",), counter=True),
        *(SignalSpec(f"net.dev.{name}", f"{name.replace('_', ' ')} per interface",
                     "bytes" if name.endswith("bytes") else "packets", labels=("iface",),
                     counter=True) for name in NET_DEV),
    )

    def unavailable(self) -> str | None:
        missing = [p for p in ("softirqs", "net/softnet_stat", "net/dev")
                   if not exists(self.host.proc / p)]
        return f"missing {', '.join('/proc/' + m for m in missing)}" if missing else None

    def __init__(self, host: Host, config: NoParams | None = None) -> None:
        super().__init__(host, config)
        self.prev: tuple[float, dict[str, dict[str, int]]] | None = None
        self.proc = f"{host.proc}/"

    def collect(self, now: float) -> dict[str, object]:
        proc = self.proc
        out: dict[str, object] = {}
        softirqs = parse_softirqs(read_kernel_file(proc + "softirqs"))
        out["softirq.net_rx"] = _family("cpu", softirqs["NET_RX"])
        out["softirq.net_tx"] = _family("cpu", softirqs["NET_TX"])
        prev, self.prev = self.prev, (now, softirqs)
        if prev is not None and now > prev[0]:
            for row in ("NET_RX", "NET_TX"):
                out[f"softirq.{row.lower()}_per_second"] = {
                    label_of("cpu", c): max(v - prev[1][row].get(c, v), 0) / (now - prev[0])
                    for c, v in softirqs[row].items() if c in prev[1][row]}
        softnet = parse_softnet_stat(read_kernel_file(proc + "net/softnet_stat"))
        for name, per_cpu in softnet.items():
            out[f"softnet.{name}"] = _family("cpu", per_cpu)
        for name, per_iface in parse_net_dev(read_kernel_file(proc + "net/dev")).items():
            out[f"net.dev.{name}"] = _family("iface", per_iface)
        return out
