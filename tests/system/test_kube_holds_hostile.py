"""[holds.kube] against an API server that drips its answers (issue 39, round 4): the
loop's read of the holds never waits on it, and the holds it last gave stay in force.

Before: KubeHolds.read() made its two GETs on the loop, each bounded per socket read only,
so an API server sending a byte every few seconds held the tick (and READY, the watchdog
and SIGTERM) for as long as it dripped."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

from tests.support.kube_standin import kubeconfig, serve

BOUND = 60.0  # a failure bound for a broken test, never a claim about speed

TOMORROW = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
HOLD = {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "guardian-holds", "namespace": "kube-system"},
        "data": {"holds.toml": f"[[hold]]\nuntil = {TOMORROW:%Y-%m-%dT%H:%M:%SZ}\n"
                               'reason = "kernel rollout"\nauthor = "sre"\n'}}


def test_an_api_that_drips_never_holds_a_tick_and_the_hold_stays_in_force(
        tmp_path: Path) -> None:
    from guardian.kube.holds import KubeHolds, KubeHoldsParams

    with serve() as (url, store):
        store.add_node("node-a")
        store.put("configmaps", HOLD)
        holds = KubeHolds(KubeHoldsParams(kubeconfig=str(kubeconfig(tmp_path, url)),
                                          node="node-a", timeout=30))
        assert [h.author for h in holds.read()] == ["sre"]
        store.drip = 0.5  # from now on every answer comes a byte every 0.5 s
        ticks: list[list[str]] = []

        def loop() -> None:  # what the service's loop does with the holds, tick after tick
            # (until its read drips: the first read's worker may still be ending when the
            # next tick asks, and that tick starts none), then 25 ticks while it drips
            while store.dripping == 0:
                assert [h.author for h in holds.read()] == ["sre"]
            while len(ticks) < 25:
                ticks.append([h.author for h in holds.read()])

        runner = threading.Thread(target=loop, daemon=True)
        runner.start()
        runner.join(BOUND)
        assert not runner.is_alive(), f"the loop was held: {len(ticks)} ticks"
        # every tick went by while the API was still dripping its first answer...
        assert store.dripping == 1 and holds.reads == 1
        # ...and the pause it gave before stayed in force at each of them
        assert ticks == [["sre"]] * 25


def test_a_read_of_the_holds_is_cut_at_its_whole_deadline(tmp_path: Path) -> None:
    """Each byte comes well within the 1 s timeout, so no per-read timeout ever fires:
    only a deadline on the whole read ends it; the holds last read stay."""
    from guardian.kube.holds import KubeHolds, KubeHoldsParams

    with serve() as (url, store):
        store.add_node("node-a")
        store.put("configmaps", HOLD)
        holds = KubeHolds(KubeHoldsParams(kubeconfig=str(kubeconfig(tmp_path, url)),
                                          node="node-a", timeout=1))
        assert [h.author for h in holds.fetch()] == ["sre"]
        store.drip = 0.2
        box: list[list[str]] = []
        reader = threading.Thread(target=lambda: box.append(
            [h.author for h in holds.fetch()]), daemon=True)
        reader.start()
        reader.join(BOUND)
        assert not reader.is_alive(), "a dripping answer was read past the whole deadline"
        assert box == [["sre"]]
        assert any("keeping the holds last read" in said for said in holds.said), holds.said
