"""What this installation of guardian is, so that a message names a fix that works where
it is printed: the Kubernetes support is an extra (``node-guardian[k8s]``) that the OS
packages (.deb, .rpm: a virtual environment at /opt/guardian without pip) do not carry."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path

EXTRA = "node-guardian[k8s]"


def has_k8s() -> bool:
    """Whether the Kubernetes extra's libraries are importable here."""
    return all(importlib.util.find_spec(m) is not None for m in ("lightkube", "httpx2"))


def pip_works() -> bool:
    """Whether ``python -m pip install`` can add a package to this environment: pip is
    there, and the environment is a virtual one or not marked externally managed (PEP
    668: a distribution's own Python refuses pip)."""
    if importlib.util.find_spec("pip") is None:
        return False
    if sys.prefix != sys.base_prefix:
        return True
    return not (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").exists()


def k8s_missing() -> str:
    """The Kubernetes support, as missing here, and the fix that works in this
    installation (``python -m pip install`` only where pip can install)."""
    what = "the Kubernetes support (the k8s extra), which this installation of guardian " \
           "does not have"
    if pip_works():
        return f"{what}: {sys.executable} -m pip install '{EXTRA}'"
    return (f"{what} and cannot add (it has no pip: an OS package or a system Python); "
            "run guardian's container image (deploy/kubernetes), or install "
            f"'{EXTRA}' with pip in a virtual environment of its own")
