"""The NVIDIA driver's device nodes as a systemd unit's device policy sees them: the
``DeviceAllow=`` groups that grant them, and whether this process's device cgroup
refuses them (then NVML cannot start, and says only "Unknown Error").

/dev/nvidiactl and /dev/nvidia<N> are character major 195 (NVIDIA/open-gpu-kernel-modules,
kernel-open/common/inc/nv-chardev-numbers.h: ``#define NV_MAJOR_DEVICE_NUMBER  195``),
which /proc/devices names after the driver's registrations:

- up to the 535 branch, kernel-open/nvidia/nv-frontend.c:
  ``register_chrdev(NV_MAJOR_DEVICE_NUMBER, "nvidia-frontend", &nv_frontend_fops)``,
  one name for every minor;
- from 545 (nv-frontend.c removed), kernel-open/nvidia/nv.c:
  ``nv_register_chrdev(0, NV_MINOR_DEVICE_NUMBER_REGULAR_MAX + 1,
  &nv_linux_devices_cdev, "nvidia", &nvidia_fops)`` (the GPUs, minors 0-247) and
  ``nv_register_chrdev(NV_MINOR_DEVICE_NUMBER_CONTROL_DEVICE, 1,
  &nv_linux_control_device_cdev, "nvidiactl", &nvidia_fops)`` (minor 255). NVIDIA's
  550.40 release notes, quoted in NVIDIA/nvidia-container-toolkit#324: "Changed the
  name visible in /proc/devices of NVIDIA devices and the NVIDIA control device from
  "nvidia-frontend" to "nvidia" and "nvidiactl"."

systemd grants every minor of each major whose /proc/devices name matches a group entry
(src/core/bpf-devices.c, bpf_devices_allow_list_major), so ``char-nvidia`` grants
/dev/nvidiactl and every /dev/nvidia<N> from 545 on and ``char-nvidia-frontend`` before;
a name /proc/devices does not list when the unit starts (no NVIDIA driver) grants
nothing. The driver's other groups are majors of their own and are not granted:
``nvidia-uvm`` (CUDA's memory: uvm.c ``#define NVIDIA_UVM_DEVICE_NAME "nvidia-uvm"``),
``nvidia-caps`` (MIG capabilities), ``nvidia-nvswitch``, ``nvidia-nvlink``,
``nvidia-caps-imex-channels``.
"""

from __future__ import annotations

from pathlib import Path

from guardian.hostio.host import access_refused
from guardian.hostio.sandbox import proc_devices

#: The node nvmlInit opens first; its refusal tells why NVML cannot start.
CONTROL_DEVICE = "/dev/nvidiactl"
#: The major of /dev/nvidiactl and /dev/nvidia<N> (nv-chardev-numbers.h).
MAJOR = 195
#: The ``DeviceAllow=`` groups that grant them: the drivers up to 535's, then 545's on.
DEVICE_GROUPS = ("char-nvidia-frontend", "char-nvidia")


def cgroup_refusal(root: Path = Path("/")) -> str:
    """Why this process cannot open the NVIDIA control device where its device cgroup
    refuses it (access(2) answers EPERM; a file's mode answers EACCES), naming the
    unit's device policy that is the likely cause; "" where it is not refused so.

    A refused /dev/nvidiactl makes nvmlInit fail with NVML_ERROR_UNKNOWN: "Failed to
    initialize NVML: Unknown Error" where a container's device list kept only
    ``c 195:* m`` (NVIDIA/nvidia-container-toolkit#251)."""
    if access_refused(root / CONTROL_DEVICE.lstrip("/")) != "EPERM":
        return ""
    listed = proc_devices(root)["char"].get(MAJOR, [])
    names = (f" (/proc/devices lists major {MAJOR} as {', '.join(listed)})" if listed
             else f" (/proc/devices lists no major {MAJOR}: no NVIDIA driver loaded)")
    return (f"this process's device cgroup refuses {CONTROL_DEVICE} (access(2): EPERM)"
            f"{names}: under systemd, the unit's DevicePolicy=closed or strict without "
            f"DeviceAllow={DEVICE_GROUPS[1]} rw (drivers up to 535: {DEVICE_GROUPS[0]}), "
            "or a driver loaded after the unit started (systemd resolves a device group "
            "when it starts the unit: restart guardian)")
