"""Why NVML cannot be loaded, said in the node's own terms: the NVIDIA GPUs on its PCI bus
and the driver bound to each (:mod:`guardian.hostio.pci`), and whether guardian runs in a
container (:mod:`guardian.hostio.container`).

pynvml's ``LIBRARY_NOT_FOUND`` says only that ``dlopen("libnvidia-ml.so.1")`` failed in
this process. On a node that runs guardian natively it means the NVIDIA driver's
user-space part is not installed; in a pod it means the container lacks the library,
whatever the node has: the image carries no NVIDIA driver, and the NVIDIA container
toolkit puts the node's libnvidia-ml.so.1 and nvidia-smi into a container it is asked to
(libnvidia-container's ``utility`` capability: src/nvc_info.c, ``utility_libs`` and
``utility_bins``). Neither is "no GPU" while the PCI bus has one.
"""

from __future__ import annotations

from collections.abc import Mapping

from guardian.hostio.container import container
from guardian.hostio.host import Host
from guardian.hostio.pci import PciFunction, gpu_functions

#: where the docs say how a pod gets the library
GPU_NODES_DOC = "docs/kubernetes.md, GPU nodes"


def library_missing(host: Host, environ: Mapping[str, str] | None = None) -> str:
    """Why libnvidia-ml.so.1 cannot be loaded here: the GPUs the PCI bus has (with the
    driver bound to each, or none), and whether the library is missing from a container
    (with where the docs say how a pod gets it) or from the host."""
    gpus = gpu_functions(host.sys)
    inside = container(host.root, environ)
    where = (f"in this container ({inside})" if inside else "on this host")
    if not gpus:
        return (f"libnvidia-ml.so.1 (NVML) is not found {where}, and no NVIDIA GPU is on "
                f"this node's PCI bus (vendor 0x10de, class 0x03)")
    said = f"{_count(gpus)} on this node's PCI bus ({_bound(gpus)}), but " \
           f"libnvidia-ml.so.1 (NVML) is not found {where}"
    if inside:
        return (f"{said}: the image brings none, the NVIDIA container runtime puts the "
                f"node's in the pod when asked (runtimeClassName nvidia, "
                f"NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility): see "
                f"{GPU_NODES_DOC}")
    return f"{said}: it is installed with the NVIDIA driver's user-space part"


def _count(gpus: list[PciFunction]) -> str:
    return "1 NVIDIA GPU" if len(gpus) == 1 else f"{len(gpus)} NVIDIA GPUs"


def _bound(gpus: list[PciFunction], most: int = 4) -> str:
    """The GPUs' addresses grouped by the driver bound to them (``0000:18:00.0,
    0000:2a:00.0 bound to nvidia; 0000:3a:00.0 with no driver bound``), at most ``most``
    addresses named per group."""
    by: dict[str, list[str]] = {}
    for f in gpus:
        by.setdefault(f.driver, []).append(f.address)
    parts = []
    for driver, addresses in by.items():
        named = ", ".join(addresses[:most]) + (f" and {len(addresses) - most} more"
                                               if len(addresses) > most else "")
        parts.append(f"{named} bound to {driver}" if driver else
                     f"{named} with no driver bound")
    return "; ".join(parts)
