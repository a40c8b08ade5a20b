"""guardian_breaker_tripped: 1 for each rule whose breaker latched a group this node is
in (issue 45); the latch also shows as a hold that never expires (+Inf)."""

from __future__ import annotations

import math

from prometheus_client import generate_latest

from guardian.model.holds import Hold
from guardian.runtime.metrics import Metrics


def test_a_latched_hold_is_the_breaker_metric() -> None:
    m = Metrics()
    m.operations.holds = [
        Hold(math.inf, "breaker tripped ...", "guardian breaker", "memcg-leak", (),
             "breaker topology.kubernetes.io/zone=a", latched=True),
        Hold(2e9, "freeze", "ops")]
    text = generate_latest(m.registry).decode()
    assert 'guardian_breaker_tripped{group="topology.kubernetes.io/zone=a",' \
        'rule="memcg-leak"} 1.0' in text
    assert text.count("guardian_breaker_tripped{") == 1
    assert 'guardian_hold_expiry_timestamp_seconds{author="guardian breaker"' in text
    assert "+Inf" in text
