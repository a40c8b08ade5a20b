"""Kubernetes support (optional: ``pip install node-guardian[k8s]``): node-scoped actions
through the real API and a fleet-wide disruption budget kept in Lease objects."""

try:  # say what is missing, not only which module
    import httpx2  # noqa: F401
    import lightkube  # noqa: F401
except ImportError as exc:
    raise ImportError(f"the Kubernetes actions need the k8s extra ({exc.name} is not "
                      "installed): pip install 'node-guardian[k8s]'") from exc
