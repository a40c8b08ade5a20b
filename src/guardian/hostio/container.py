"""Whether guardian runs in a container, and what says so: a host library that the
container's own filesystem lacks (libnvidia-ml.so.1 in the DaemonSet's image) is then no
proof that the node lacks it.

What is read, each written by the one who makes the container:

- ``KUBERNETES_SERVICE_HOST`` in this process's environment: the kubelet puts the API
  server's service into every container's environment, whatever ``enableServiceLinks``
  says (pkg/kubelet/kubelet_pods.go, getServiceEnvVarMap: "We always want to add
  environment variables for master kubernetes service ... even if enableServiceLinks is
  false");
- ``/run/.containerenv``: podman creates it in every container (podman-run(1));
- ``/.dockerenv``: Docker (moby) creates it in every container's init layer;
- ``container`` in this process's environment: systemd's Container Interface asks a
  container manager to set it for the container's PID 1 (``container=podman``,
  ``container=systemd-nspawn``), and podman sets it for the container's processes.

With ``hostPID`` (the DaemonSet) ``/proc/1`` is the node's init, not the container's, so
its environment says nothing of this process and is not read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: the files a container engine creates in a container's root, by the engine's name
MARKERS = {"run/.containerenv": "podman", ".dockerenv": "docker"}


def container(root: Path = Path("/"), environ: Mapping[str, str] | None = None
              ) -> str | None:
    """What says this process runs in a container (``a Kubernetes pod
    (KUBERNETES_SERVICE_HOST)``, ``podman (/run/.containerenv)``), or None when nothing
    does. ``root`` is the filesystem the markers are looked for under (a fixture's
    root in tests); ``environ`` this process's environment by default."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "a Kubernetes pod (KUBERNETES_SERVICE_HOST is set)"
    for marker, engine in MARKERS.items():
        if os.path.lexists(root / marker):
            return f"a {engine} container (/{marker})"
    if env.get("container"):
        return f"a container (container={env['container']})"
    return None
