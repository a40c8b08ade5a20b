"""The Kubernetes API stand-in for the tests: it lives in guardian.testing.kubeapi, since
the benchmarks (bench/fleet.py) use it too and import nothing of the tests."""

from __future__ import annotations

from guardian.testing.kubeapi import (
    CORE,
    GROUPS,
    Store,
    kubeconfig,
    kubectl,
    serve,
    status,
)

__all__ = ["CORE", "GROUPS", "Store", "kubeconfig", "kubectl", "serve", "status"]
