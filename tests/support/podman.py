"""podman as the image tests run it, and what it says when its OCI runtime will not start
a container on this host."""

from __future__ import annotations

import shutil

# What podman says when its OCI runtime (runc, crun) refuses to start a container here:
# crun on a hybrid cgroup hierarchy gives "OCI runtime error: crun: cgroups in hybrid mode
# not supported" (podman's define.ErrOCIRuntime, "OCI runtime error", and its kin all say
# "OCI runtime").
RUNTIME_REFUSED = ("OCI runtime",)


def podman_argv(*args: str) -> list[str]:
    """podman with cgroupfs, and runc where it is installed (.ci/run installs it whenever
    it is missing, a podman that came with crun alone included); else podman's default
    runtime, whose refusal the image tests skip on (RUNTIME_REFUSED)."""
    runtime = ["--runtime=runc"] if shutil.which("runc") else []
    return ["podman", "--cgroup-manager=cgroupfs", *runtime, *args]
