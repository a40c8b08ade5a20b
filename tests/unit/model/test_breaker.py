"""The correlated-failure breaker's judgement (guardian.model.breaker): which (rule,
group) pairs trip, with the numbers why; pure, on a clock the caller gives."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from guardian.model.breaker import FLEET, BreakerParams, NodeFiring, groups_of, judge, percents

ZONE = "topology.kubernetes.io/zone"
NOW = 1_800_000_000.0


def fleet(zone_a: int, firing_a: int, zone_b: int, firing_b: int, rule: str = "memcg-leak",
          onset: float = NOW - 120) -> list[NodeFiring]:
    """``zone_a`` nodes in zone a, the first ``firing_a`` of them firing ``rule`` since
    ``onset``; the same for zone b."""
    out = []
    for zone, n, firing in (("a", zone_a, firing_a), ("b", zone_b, firing_b)):
        for i in range(n):
            out.append(NodeFiring(f"{zone}-{i:02d}", {ZONE: zone},
                                  {rule: onset} if i < firing else {}))
    return out


def test_half_of_one_zone_trips_that_zone_only() -> None:
    """7 of 12 nodes in zone a fire: zone a trips (58% > 30%); the whole fleet (8 of
    24 = 0.33) trips too; zone b's one failing node does not trip zone b."""
    p = BreakerParams(by=[ZONE])
    trips = judge(fleet(12, 7, 12, 1), NOW, p)
    assert [(t.rule, t.group, t.holding, t.nodes) for t in trips] == [
        ("memcg-leak", FLEET, 8, 24), ("memcg-leak", f"{ZONE}=a", 7, 12)]
    zone = trips[1]
    # pending counts (the breaker must hold a wave before its `for` runs out): the
    # words say the condition began to hold; before, "7 of 12 nodes ... fired memcg-leak"
    # while none had fired yet
    assert zone.why == ("memcg-leak's condition began to hold (pending or firing) on 7 of "
                        f"12 nodes in {ZONE}=a within 10m (58%, above the bound of 30%)")
    assert zone.names == tuple(f"a-{i:02d}" for i in range(7))
    assert zone.first == zone.last == NOW - 120
    assert "on 8 of 24 nodes in the fleet within" in trips[0].why
    assert "fired" not in trips[0].why


def test_the_bound_is_strict_and_min_nodes_spares_small_pools() -> None:
    # 3 of 10 is a share of exactly 0.3: not above it
    assert judge(fleet(10, 3, 0, 0), NOW, BreakerParams(share=0.3)) == []
    assert len(judge(fleet(10, 4, 0, 0), NOW, BreakerParams(share=0.3))) == 1
    # a pool of two with one failing node: share 0.5, but fewer than min_nodes (3)
    assert judge(fleet(2, 1, 0, 0), NOW, BreakerParams()) == []
    assert judge(fleet(2, 2, 0, 0), NOW, BreakerParams()) == []
    assert len(judge(fleet(2, 2, 0, 0), NOW, BreakerParams(min_nodes=2))) == 1


def test_only_onsets_within_the_window_count() -> None:
    p = BreakerParams(window=600)
    old = fleet(10, 5, 0, 0, onset=NOW - 601)  # firing for longer: separate failures
    assert judge(old, NOW, p) == []
    edge = fleet(10, 5, 0, 0, onset=NOW - 600)
    assert len(judge(edge, NOW, p)) == 1
    # an onset after now (a skewed clock) counts as now, and the numbers say so
    ahead = fleet(10, 5, 0, 0, onset=NOW + 30)
    [trip] = judge(ahead, NOW, p)
    assert trip.first == trip.last == NOW


def test_rules_are_judged_apart_and_nodes_without_the_label_form_their_own_group() -> None:
    nodes = [NodeFiring(f"n{i}", {}, {"r1": NOW - 10} if i < 2 else {"r2": NOW - 10})
             for i in range(4)]
    # 2 of 4 fire r1 and 2 of 4 fire r2: neither reaches min_nodes 3
    assert judge(nodes, NOW, BreakerParams(by=[ZONE])) == []
    trips = judge(nodes, NOW, BreakerParams(by=[ZONE], min_nodes=2))
    assert [(t.rule, t.group) for t in trips] == [
        ("r1", FLEET), ("r1", f"{ZONE}="), ("r2", FLEET), ("r2", f"{ZONE}=")]
    assert groups_of({"a": "1"}, ["a", "b"]) == [FLEET, "a=1", "b="]


def test_several_label_keys_group_apart() -> None:
    pool = "karpenter.sh/nodepool"
    nodes = [NodeFiring(f"n{i}", {ZONE: "a" if i % 2 else "b", pool: "gpu" if i < 4
                                  else "cpu"}, {"x": NOW} if i < 4 else {})
             for i in range(16)]
    trips = judge(nodes, NOW, BreakerParams(by=[ZONE, pool]))
    assert [t.group for t in trips] == [f"{pool}=gpu"]  # 4 of 4; zones 2 of 8 each
    assert judge([], NOW, BreakerParams()) == []


def test_params_refuse_nonsense() -> None:
    for bad in ({"share": 0}, {"share": 1}, {"min_nodes": 0}, {"window": "0s"},
                {"windw": "5m"}):
        with pytest.raises(ValidationError):
            BreakerParams.model_validate(bad)
    assert BreakerParams.model_validate({"window": "15m"}).window == 900


def test_the_numbers_read_as_true_where_the_share_is_just_above_the_bound() -> None:
    """76 of 250 is 0.304, above 0.3; before, the words said "share 0.30 > 0.3", which
    reads as false. The share gets the decimals that show it above the bound."""
    [trip] = judge(fleet(250, 76, 0, 0), NOW, BreakerParams())
    assert trip.why == ("memcg-leak's condition began to hold (pending or firing) on 76 "
                        "of 250 nodes in the fleet within 10m (30.4%, above the bound of "
                        "30%)")
    assert percents(0.3000001, 0.3) == ("30.00001%", "30%")
    assert percents(1 / 3, 0.333) == ("33.33%", "33.3%")
    assert percents(0.4, 0.3) == ("40%", "30%")


def test_a_latch_written_before_says_its_numbers_in_todays_words() -> None:
    """A latch's record is said again from its numbers (`guardian breaker`, the hold's
    reason): one an older guardian wrote, with "share 0.30 > 0.3", reads true; a record
    without numbers keeps its words."""
    pytest.importorskip("lightkube")
    from guardian.kube.breaker import Latch

    old = {"rule": "memcg-leak", "group": f"{ZONE}=a", "at": NOW, "firing": 76,
           "nodes": 250, "share": 0.304, "bound": 0.3, "window": 600.0,
           "why": f"76 of 250 nodes in {ZONE}=a fired memcg-leak within 10m: share "
                  "0.30 > 0.3"}
    assert Latch("l", old, "a-0075").why == (
        f"memcg-leak's condition began to hold (pending or firing) on 76 of 250 nodes in "
        f"{ZONE}=a within 10m (30.4%, above the bound of 30%)")
    # today's record names the count "holding"; one written before, "firing"
    new = {**{k: v for k, v in old.items() if k != "firing"}, "holding": 76}
    assert Latch("l", new, "a-0075").why == Latch("l", old, "a-0075").why
    assert Latch("l", {"rule": "r", "why": "as written"}, "n").why == "as written"
