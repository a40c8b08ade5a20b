"""The shipped NIC counter rules against what each ENA driver release actually lists and
increments (guardian.testing.ENA_GENERATIONS, read from amzn-drivers
kernel/linux/ena/ena_ethtool.c and ena_netdev.c at each tag): a full 8-queue counter set
of that release, traffic counters rising, then the reset as that release counts it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from guardian.core.snapshot import Family, labels_of
from guardian.engine.engine import Engine
from guardian.policy.loader import load_rules
from guardian.sources.ethtool import GAUGES, EthtoolSource, NicInfo
from guardian.testing import ENA_GENERATIONS, ena_stat_names, snapshot
from tests.support.checkout import REPO

TICK = 30.0
RESET_AT = 20  # ticks


def _run(generation: str, event: Callable[[dict[str, float], int], None],
         ticks: int = 30) -> set[str]:
    """Rules that fired at any tick while ``event`` changes the counters."""
    names = ena_stat_names(8, generation)
    counters = dict.fromkeys(names, 0.0)
    engine = Engine(load_rules([REPO / "rules"]))
    fired: set[str] = set()
    for t in range(ticks):
        for q in range(8):  # traffic
            for stat in ("cnt", "bytes"):
                counters[f"queue_{q}_tx_{stat}"] += 1000.0
                counters[f"queue_{q}_rx_{stat}"] += 1000.0
        event(counters, t)
        nic: Family = {}
        levels: Family = {}
        for name, value in counters.items():
            key = labels_of({"iface": "eth0", "driver": "ena", "stat": name})
            (levels if name in GAUGES["ena"] else nic)[key] = value
        engine.evaluate(snapshot(t * TICK, {"nic.stat": nic, "nic.gauge": levels}))
        fired |= set(engine.firing())
    return fired


def _missed_tx_reset(generation: str) -> Callable[[dict[str, float], int], None]:
    gen = ENA_GENERATIONS[generation]

    def event(c: dict[str, float], t: int) -> None:
        if t == RESET_AT - 1:  # Tx completions overdue on queue 3
            # 1.x assigns the number now overdue (a level); 2.x adds it up
            c["queue_3_tx_missed_tx"] = 12.0 if generation == "1.5.0" else \
                c["queue_3_tx_missed_tx"] + 12.0
        if t == RESET_AT:
            if generation == "1.5.0":
                c["queue_3_tx_missed_tx"] = 0.0  # the reset cleared them
            for stat in gen.on_reset:
                c[stat] += 1.0
            if gen.reason_counters:
                c["missing_tx_cmpl"] += 1.0
    return event


def _healthy(c: dict[str, float], t: int) -> None:
    if "conntrack_allowance_available" in c:  # a level that goes down and up
        c["conntrack_allowance_available"] = 50000.0 - (t % 7) * 1000.0


@pytest.mark.parametrize("generation", list(ENA_GENERATIONS))
def test_a_healthy_nic_fires_nothing(generation: str) -> None:
    assert _run(generation, _healthy) == set()


@pytest.mark.parametrize("generation", list(ENA_GENERATIONS))
def test_a_reset_for_missed_completions_fires_on_every_release(generation: str) -> None:
    """Every release takes the interface down and up on a reset and counts the missed Tx
    completions; from 2.12.0 total_resets and missing_tx_cmpl say it outright."""
    assert _run(generation, _missed_tx_reset(generation)) == {
        "nic-reset-counters", "nic-missed-tx-counters"}


@pytest.mark.parametrize("generation", ["2.12.0", "2.17.0"])
def test_a_reset_for_poll_starvation_is_named(generation: str) -> None:
    """ena_reset_device with ENA_REGS_RESET_SUSPECTED_POLL_STARVATION counts
    suspected_poll_starvation and total_resets (ena_netdev.h resets_to_stats_offset_map)."""
    def event(c: dict[str, float], t: int) -> None:
        if t == RESET_AT:
            c["suspected_poll_starvation"] += 1.0
            for stat in ENA_GENERATIONS[generation].on_reset:
                c[stat] += 1.0
    assert _run(generation, event) == {"nic-reset-counters", "nic-poll-starvation-counter"}


@pytest.mark.parametrize("generation", ["2.8.0", "2.12.0", "2.17.0"])
def test_a_failed_reset_is_its_own_alarm(generation: str) -> None:
    """ena_fw_reset_device: adapter->dev_stats.reset_fail += !!rc (2.8.0+); the interface
    went down and did not come back up."""
    def event(c: dict[str, float], t: int) -> None:
        if t == RESET_AT:
            c["interface_down"] += 1.0
            c["reset_fail"] += 1.0
            if "total_resets" in c:
                c["total_resets"] += 1.0
    assert _run(generation, event) == {"nic-reset-counters", "nic-reset-failed-counter"}


def test_ena_allowance_available_is_a_gauge() -> None:
    """conntrack_allowance_available is a level: it goes to nic.gauge (not a counter),
    so a fall is never read as a counter reset."""
    names = tuple(ena_stat_names(2, "2.17.0"))
    info = NicInfo("eth0", "ena", names)
    assert [names[i] for i in info.gauges] == ["conntrack_allowance_available"]
    assert NicInfo("eth0", "virtio_net", names).gauges == ()
    specs = {s.name: s for s in EthtoolSource.specs}
    assert specs["nic.stat"].counter and not specs["nic.gauge"].counter
