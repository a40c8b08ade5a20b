"""A health probe that has not answered yet is no value, never "not down": until every
configured probe has run once, probe.up has no value and the rules over it are unknown.
Results are fed to the source by hand (nothing is probed here; probing for real:
tests/system/test_probe_source.py)."""

from __future__ import annotations

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.probe import ProbeConfig, ProbeSource, Result


def test_no_value_until_every_probe_has_answered() -> None:
    src = ProbeSource(Host(), ProbeConfig.model_validate({"probes": {
        "kubelet": {"url": "http://127.0.0.1:10248/healthz"},
        "containerd": {"unix": "/run/containerd/containerd.sock"}}}))
    src.close()  # no workers: the test feeds each result as a worker would
    assert src.collect(0.0)["probe.up"] is None  # before: {}, and probe.up == 0 read ok
    src.record("containerd", Result(0.0, True, 0.001))
    out = src.collect(0.0)
    # kubelet's first probe still under way (up to its timeout): "kubelet is down" has
    # no answer yet, and neither has "no probe is down"
    assert out["probe.up"] is None
    assert out["probe.latency_seconds"] is None
    age = out["probe.age_seconds"]  # when each probe last ran stands
    assert isinstance(age, dict) and set(age) == {labels_of({"probe": "containerd"})}
    src.record("kubelet", Result(0.0, False, 0.0, 500, "status", "HTTP 500"))
    out = src.collect(0.0)
    assert out["probe.up"] == {labels_of({"probe": "kubelet"}): 0.0,
                               labels_of({"probe": "containerd"}): 1.0}
    assert out["probe.status_code"] == {labels_of({"probe": "kubelet"}): 500.0}


def test_with_no_probe_configured_the_source_is_unavailable_and_says_why() -> None:
    """Before: the source ran with nothing to probe, and `kubelet-unhealthy` (over
    probe.up{probe="kubelet"}) read `ok` over an empty family: kubelet was never probed."""
    # not configured (the operator's choice, cause "unconfigured"), told apart from a
    # host that cannot; a caller that asks only unavailable() learns it too
    assert ProbeSource(Host()).unconfigured() == "no probes in [sources.probe]"
    assert ProbeSource(Host()).unavailable() == "no probes in [sources.probe]"
    src = ProbeSource(Host(), ProbeConfig.model_validate({"probes": {
        "kubelet": {"url": "http://127.0.0.1:10248/healthz"}}}))
    src.close()
    assert src.unavailable() is None and src.unconfigured() is None
