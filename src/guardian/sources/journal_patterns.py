"""Journal patterns guardian ships, in sets a config turns on by name.

``[sources.journal] include = ["nvidia-fabricmanager"]`` reads the set's patterns, each
scoped to its units (journald's ``_SYSTEMD_UNIT``, which the sender cannot choose), as if
they were written under ``patterns``; a pattern of ``patterns`` with the same name
replaces the shipped one. Rule tests check ``[[journal]]`` samples against every shipped
set whether or not a config includes it, so the shipped rules' tests run as shipped.

Each pattern names where its wording comes from: a public report whose machine printed
the line (its URL), or the source that quotes it. The rule tests quote the lines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShippedPattern:
    """A regular expression over an entry's MESSAGE, the units it is meant for, what a
    match means and where the wording comes from."""

    regex: str
    units: tuple[str, ...]
    about: str
    origin: str


FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
_FM = (FABRIC_MANAGER_UNIT,)

# NVIDIA Fabric Manager (nv-fabricmanager, the nvidia-fabricmanager unit) on NVSwitch
# systems. It prints why it cannot start on stderr, which systemd journals under the unit
# (from 570 through nvidia-fabricmanager-start.sh, the same unit); its own log lines
# ("[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] text") go to LOG_FILE_NAME in fabricmanager.cfg
# (/var/log/fabricmanager.log) and reach the journal only with LOG_USE_SYSLOG=1 or an
# empty LOG_FILE_NAME (stdout).
FABRIC_MANAGER: dict[str, ShippedPattern] = {
    "fm_nvswitch_fatal": ShippedPattern(
        r"\bdetected NVSwitch fatal error \d+",
        _FM, "Fabric Manager saw a fatal NVSwitch error (SXid): the GPUs behind the switch "
        "need a reset, the jobs on them fail",
        "gpud components/accelerator/nvidia/fabric-manager/log_matcher.go quotes "
        "'[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on "
        "fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33'"),
    "fm_nvswitch_nonfatal": ShippedPattern(
        r"\bdetected NVSwitch non-fatal error \d+",
        _FM, "Fabric Manager saw a non-fatal NVSwitch error (SXid) on a port",
        "gpud log_matcher.go quotes '[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected "
        "NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 "
        "physical id 3 port 61'"),
    "fm_multicast_gpu_missing": ShippedPattern(
        r"\bfailed to find the GPU handle \d+ in the multicast team\b",
        _FM, "a multicast (NVLink SHARP) team names a GPU Fabric Manager no longer has: "
        "the GPU lost its NVLinks",
        "gpud log_matcher.go quotes '[Sep 17 2024 06:01:46] [ERROR] [tid 1230079] failed to "
        "find the GPU handle 5410063385821516767 in the multicast team request setup "
        "6130285411925746235.'"),
    "fm_driver_mismatch": ShippedPattern(
        r"\bfabric manager NVIDIA GPU driver interface version \S+ (?:don't|doesn't|does not)"
        r" match with driver version\b",
        _FM, "Fabric Manager's version is not the loaded driver's: it refuses to start",
        "https://github.com/NVIDIA/gpu-operator/issues/544, "
        "https://github.com/akash-network/website/pull/632, "
        "https://github.com/NVIDIA/gpu-driver-container/issues/735"),
    "fm_nvswitch_query_failed": ShippedPattern(
        r"\brequest to query NVSwitch device information from NVSwitch driver failed\b",
        _FM, "Fabric Manager found no NVSwitch to manage through the driver "
        "(NV_WARN_NOTHING_TO_DO: none on the bus, the nvswitch driver not bound, or an "
        "NVLink 5 board without NVLSM): it exits",
        "https://github.com/NVIDIA/gpu-operator/issues/610, "
        "https://github.com/data-infra/cube-studio/issues/29, "
        "https://github.com/siderolabs/extensions/pull/717"),
    "fm_config_invalid": ShippedPattern(
        r"\bfabric manager config file item: \S+ has an invalid value\b",
        _FM, "an item of fabricmanager.cfg is invalid: Fabric Manager exits",
        "https://github.com/siderolabs/extensions/issues/511"),
    "fm_exited": ShippedPattern(
        r"""\bnv-fabricmanager [^"]*" failed! Exit code: \d+""",
        _FM, "nvidia-fabricmanager-start.sh (driver 570 on) says nv-fabricmanager exited "
        "with an error",
        "https://github.com/data-infra/cube-studio/issues/29"),
}

#: The shipped sets by the name ``include`` gives them.
PATTERN_SETS: dict[str, dict[str, ShippedPattern]] = {
    "nvidia-fabricmanager": FABRIC_MANAGER,
}
