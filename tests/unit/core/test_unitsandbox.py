"""guardian.core.unitsandbox: a unit's sandbox read as systemd reads it (issue 38): the
shipped unit's IP firewall, read-only root, closed device policy and bounding set, and
drop-ins that widen each of them."""

from __future__ import annotations

import ipaddress
from importlib import resources

from guardian.core.unitsandbox import parse

SHIPPED = (resources.files("guardian") / "data" / "systemd" / "guardian.service").read_text()


def ip(a: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(a)


def test_the_shipped_unit_allows_loopback_only() -> None:
    box = parse([("unit", SHIPPED)])
    assert box.ip_allowed(ip("127.0.0.1")) and box.ip_allowed(ip("::1"))
    assert not box.ip_allowed(ip("10.0.0.5")) and not box.ip_allowed(ip("2001:db8::1"))
    assert box.ip_rules() == "IPAddressDeny=any, IPAddressAllow=localhost"
    # a drop-in that allows the webhook's address; an empty assignment resets the list
    widened = parse([("unit", SHIPPED), ("d", "[Service]\nIPAddressAllow=10.0.0.5/32\n")])
    assert widened.ip_allowed(ip("10.0.0.5")) and not widened.ip_allowed(ip("10.0.0.6"))
    reset = parse([("unit", SHIPPED), ("d", "[Service]\nIPAddressDeny=\n")])
    assert reset.ip_allowed(ip("10.0.0.6"))


def test_the_shipped_unit_writes_only_its_read_write_paths() -> None:
    box = parse([("unit", SHIPPED)])
    assert box.write_denied("/etc/foo") == "ProtectSystem=strict"
    assert box.write_denied("/proc/sys/vm/drop_caches") is None
    assert box.write_denied("/proc/sys/kernel/panic") == "ReadOnlyPaths=/proc/sys"
    assert box.write_denied("/proc/irq/12/smp_affinity_list") is None
    assert box.write_denied("/var/lib/guardian/x") is None  # StateDirectory=
    assert box.write_denied("/tmp/x") is None  # PrivateTmp=yes
    assert box.write_denied("/sys/fs/cgroup/system.slice") == "ProtectControlGroups=yes"
    assert box.write_denied("/root/x") == "ProtectHome=yes"
    assert "/var/log/guardian" in box.writable_paths()
    more = parse([("unit", SHIPPED), ("d", "[Service]\nReadWritePaths=-/etc/nv\n"
                                           "ProtectControlGroups=no\n")])
    assert more.write_denied("/etc/nv/x") is None and more.write_denied("/etc/x")
    assert more.write_denied("/sys/fs/cgroup/system.slice") is None


def test_devices_and_capabilities() -> None:
    box = parse([("unit", SHIPPED)])
    assert box.device_denied("/dev/kmsg r") is None and box.device_denied("/dev/null") is None
    # a need says its access ("rw" when it says none); one entry must grant all of it
    assert box.device_denied("/dev/kmsg") == "DeviceAllow=/dev/kmsg r grants less than rw"
    assert box.device_denied("/dev/nvidia0") == "DevicePolicy=closed"
    assert box.capability_denied("CAP_KILL") is None
    assert box.capability_denied("cap_sys_admin") == \
        "CapabilityBoundingSet=CAP_KILL CAP_SYSLOG"
    more = parse([("unit", SHIPPED), ("d", "[Service]\nDeviceAllow=/dev/nvidia0 rw\n"
                                           "CapabilityBoundingSet=CAP_SYS_ADMIN\n")])
    assert more.device_denied("/dev/nvidia0") is None
    assert more.capability_denied("CAP_SYS_ADMIN") is None
    assert more.capability_denied("CAP_KILL") is None  # lines are merged, not replaced
    # no DevicePolicy= and no bounding set: anything; ~ takes away; "" empties
    assert parse([("u", "[Service]\n")]).device_denied("/dev/sda") is None
    dropped = parse([("u", "[Service]\nCapabilityBoundingSet=~CAP_SYS_ADMIN\n")])
    assert dropped.capability_denied("CAP_SYS_ADMIN") and \
        dropped.capability_denied("CAP_NET_ADMIN") is None
    assert parse([("u", "[Service]\nCapabilityBoundingSet=\n")]).capability_denied(
        "CAP_KILL")
    # only [Service] counts
    assert parse([("u", "[Unit]\nIPAddressDeny=any\n")]).ip_allowed(ip("10.0.0.5"))


def test_the_system_call_filter_in_order_with_its_groups() -> None:
    """The shipped unit's allow-list (@system-service) then ~@debug refuse perf_event_open
    (in systemd's @debug); a later allow line adds it back, in either mode; "" resets."""
    box = parse([("unit", SHIPPED)])
    assert box.syscall_denied("perf_event_open") == \
        "SystemCallFilter=~@debug refuses (perf_event_open is in @debug)"
    granted = parse([("unit", SHIPPED), ("d", "[Service]\nSystemCallFilter=perf_event_open\n")])
    assert granted.syscall_denied("perf_event_open") is None
    # the allow-list alone does not hold it
    assert parse([("u", "[Service]\nSystemCallFilter=@system-service\n")]).syscall_denied(
        "perf_event_open") == "allow-list SystemCallFilter=@system-service does not hold"
    # a deny-list first: ":errno" suffixes; a later allow line takes it out of the set
    deny = "[Service]\nSystemCallFilter=~@mount @debug:EPERM\n"
    assert parse([("u", deny)]).syscall_denied("perf_event_open")
    assert parse([("u", deny + "SystemCallFilter=perf_event_open\n")]).syscall_denied(
        "perf_event_open") is None
    assert parse([("u", "[Service]\nSystemCallFilter=~@mount\n")]).syscall_denied(
        "perf_event_open") is None
    assert parse([("u", SHIPPED), ("d", "[Service]\nSystemCallFilter=\n")]).syscall_denied(
        "perf_event_open") is None
    assert parse([("u", "[Service]\n")]).syscall_denied("perf_event_open") is None
    # a system call whose groups are not known here: the groups may refuse it
    assert (box.syscall_denied("bpf") or "").startswith("SystemCallFilter= may refuse")
    assert parse([("u", "[Service]\nSystemCallFilter=~bpf\n")]).syscall_denied("bpf") == \
        "SystemCallFilter=~bpf refuses"


# /proc/devices as the kernel prints it (fs/char_dev.c, chrdev_show: "%3d %s\n") with the
# names the NVIDIA driver registers (NVIDIA/open-gpu-kernel-modules): up to 535,
# nv-frontend.c register_chrdev(NV_MAJOR_DEVICE_NUMBER, "nvidia-frontend", ...); from 545,
# nv.c nv_register_chrdev(0, ..., "nvidia", ...) and (NV_MINOR_DEVICE_NUMBER_CONTROL_DEVICE,
# 1, ..., "nvidiactl", ...); nvidia-modeset-linux.c register_chrdev_region(NVKMS_RDEV, 1,
# "nvidia-modeset") (195:254). nvidia-uvm, nvidia-caps, nvidia-nvswitch and nvidia-nvlink
# take a dynamic major (alloc_chrdev_region): 508-511 stand for whatever the kernel gives.
DRIVER_535 = {1: ["mem"], 195: ["nvidia-frontend"], 508: ["nvidia-uvm"],
              509: ["nvidia-caps"], 510: ["nvidia-nvswitch"], 511: ["nvidia-nvlink"]}
DRIVER_545 = {1: ["mem"], 195: ["nvidia", "nvidia-modeset", "nvidiactl"],
              508: ["nvidia-uvm"], 509: ["nvidia-caps"], 510: ["nvidia-nvswitch"],
              511: ["nvidia-nvlink"]}
CPU_NODE = {1: ["mem"], 136: ["pts"]}  # no NVIDIA driver: no 195


def test_the_shipped_unit_grants_the_nvidia_major_and_nothing_else_of_the_driver() -> None:
    """Issue 44: DevicePolicy=closed with only /dev/kmsg left NVML blind on a GPU node,
    and the advice DeviceAllow=/dev/nvidia[0-9]* rw was no device systemd can stat. The
    unit's groups, resolved as systemd 252 resolves them (bpf_devices_allow_list_major:
    fnmatch of each /proc/devices name, every minor of a matched major), grant major 195
    (/dev/nvidiactl 195:255, /dev/nvidia<N> 195:N) under either driver's names, not
    nvidia-uvm, nvidia-caps, nvidia-nvswitch or nvidia-nvlink, and nothing on a node
    without the driver."""
    from guardian.hostio.nvidiadev import DEVICE_GROUPS, MAJOR

    box = parse([("unit", SHIPPED)])
    assert box.granted_majors("char", DRIVER_535) == {MAJOR}
    assert box.granted_majors("char", DRIVER_545) == {MAJOR}
    assert box.granted_majors("char", CPU_NODE) == set()
    for group in DEVICE_GROUPS:
        assert box.device_denied(f"{group} rw") is None
    assert box.device_denied("char-nvidia-uvm") == "DevicePolicy=closed"
    # a node's path is granted through the groups of its major, where they are known
    assert box.device_denied("/dev/nvidia0", ("char-nvidia",)) is None
    assert box.device_denied("/dev/nvidia0", ("char-nvidia-uvm",)) == "DevicePolicy=closed"
    # the HEAD unit of this change: only /dev/kmsg, and no group
    before = parse([("unit", SHIPPED.replace("DeviceAllow=char-", "#"))])
    assert before.granted_majors("char", DRIVER_545) == set()
    assert before.device_denied("char-nvidia rw") == "DevicePolicy=closed"


def test_device_groups_match_as_systemd_matches_them() -> None:
    """systemd.resource-control(5): "The device group is matched according to filename
    globbing rules, you may hence use the "*" and "?" wildcards"; "char-*" is every
    character device; a read-only entry does not grant a read-write open."""
    wide = parse([("u", "[Service]\nDevicePolicy=closed\nDeviceAllow=char-nvidia* rw\n")])
    assert wide.granted_majors("char", DRIVER_545) == {195, 508, 509, 510, 511}
    assert wide.device_denied("char-nvidia") is None
    every = parse([("u", "[Service]\nDevicePolicy=strict\nDeviceAllow=char-* rw\n")])
    assert every.device_denied("char-nvidia") is None
    assert every.device_denied("block-loop") == "DevicePolicy=strict"
    read = parse([("u", "[Service]\nDevicePolicy=closed\nDeviceAllow=char-nvidia r\n")])
    assert read.granted_majors("char", DRIVER_545) == set()
    assert read.device_denied("char-nvidia rw") == \
        "DeviceAllow=char-nvidia r grants less than rw"
    assert read.device_denied("char-nvidia r") is None
    bare = parse([("u", "[Service]\nDeviceAllow=char-nvidia\n")])  # no letters: rwm
    assert bare.device_denied("char-nvidia rw") is None
    assert bare.device_denied("/dev/sda") == "DevicePolicy=auto"
