"""Kubernetes support (optional: ``pip install node-guardian[k8s]``): node-scoped actions
through the real API and a fleet-wide disruption budget kept in Lease objects."""

try:  # say what is missing, not only which module
    import httpx2  # noqa: F401
    import lightkube  # noqa: F401
except ImportError as exc:
    from guardian.core.install import k8s_missing

    raise ImportError(f"{exc.name} is not installed: the Kubernetes actions need "
                      f"{k8s_missing()}") from exc
