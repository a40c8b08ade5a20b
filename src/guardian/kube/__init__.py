"""Kubernetes support (optional: ``pip install node-guardian[k8s]``): node-scoped actions
through the real API and a fleet-wide disruption budget kept in Lease objects."""
