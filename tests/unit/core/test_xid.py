"""NVIDIA's Xid catalog as shipped data (guardian/data/xid.toml): each code's action is the
one NVIDIA's catalog gives it, an Xid 154 takes the recovery action its line names, and a
malformed catalog is refused, never read as "no action"."""

from __future__ import annotations

import pytest

from guardian.core.xid import (
    ACTION_NAMES,
    action_of,
    catalog,
    parse,
    parse_recovery,
    recovery_actions,
)
from guardian.sources.kernel_patterns import XID_ACTIONS, xid_of

# NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), its
# "Resolution Bucket (Immediate Action)" as leptonai/gpud's catalog_generated.go (commit
# b9842de2) transcribed the spreadsheet, and NVSentinel's xiderrorsmapping.csv (6f8b0fcf)
CATALOG_CASES = [
    (136, "reset_gpu", "ALI_TRAINING_FAIL, 'Link Training Failed': RESET_GPU (both)"),
    (155, "reset_gpu", "NVLINK_SW_DEFINED_ERROR: RESET_GPU (both)"),
    (156, "reset_gpu", "RESOURCE_RETIREMENT_EVENT: RESET_GPU (both)"),
    (158, "reset_gpu", "GPU_FATAL_TIMEOUT, 'GPU Fatal Timeout': RESET_GPU (both)"),
    (151, "reboot", "ROBUST_CHANNEL_KEY_ROTATION_ERROR: RESTART_VM (both), the VM guardian "
                    "runs in"),
    (79, "reboot", "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: RESTART_BM (both)"),
    (48, "reset_gpu", "ROBUST_CHANNEL_GPU_ECC_DBE: WORKFLOW_XID_48; the row remapping it starts "
                      "takes effect at the next GPU reset"),
    (43, "ignore", "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR: IGNORE (both)"),
    (45, "restart_app", "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL: WORKFLOW_XID_45, the code alone "
                        "(an NVML event) cannot say what caused it"),
    (160, "ignore", "CHANNEL_RETIREMENT_EVENT: catalog IGNORE (NVSentinel RESTART_BM)"),
    (162, "unknown", "the driver's ISINK_REENGAGED, the catalog's PSHC_REENGAGED: no bucket "
                     "(NVSentinel: a row without a mnemonic, RESET_GPU)"),
    (54, "unknown", "SILENT_RUNNING_PWR_REDUCED_CLOCKING: CHECK_MECHANICALS"),
    (13, "restart_app", "ROBUST_CHANNEL_GR_EXCEPTION: RESTART_APP (both)"),
    (144, "nvlink", "NVLINK_SAW_ERROR: WORKFLOW_NVLINK5_ERR (both)"),
    (154, "unknown", "GPU_RECOVERY_ACTION_CHANGED: the action is on its line; an NVML event "
                     "(the code alone) has none"),
    (9999, "unknown", "not in the catalog: a code newer than the file"),
]


@pytest.mark.parametrize(("code", "action", "origin"), CATALOG_CASES,
                         ids=[str(c[0]) for c in CATALOG_CASES])
def test_each_code_has_the_action_nvidias_catalog_gives_it(
        code: int, action: str, origin: str) -> None:
    assert action_of(code) == action, origin


def test_the_kernel_log_source_reads_the_same_catalog() -> None:
    assert catalog() == XID_ACTIONS
    assert set(catalog().values()) == set(ACTION_NAMES) - {"unknown", "drain_p2p"}
    # every name open-gpu-kernel-modules 595.45.04 prints (src/nvidia/src/kernel/gpu/gpu.c
    # _gpuRecoveryActionName), each value nvml.h's nvmlDeviceGpuRecoveryAction_t has it as
    names, values = recovery_actions()
    assert set(names) == {"None", "GPU Reset Required", "Node Reboot Required", "Drain P2P",
                          "Drain and Reset", "Recover IMEX Domain"}
    assert [names[n] for n in ("None", "GPU Reset Required", "Node Reboot Required",
                               "Drain P2P", "Drain and Reset", "Recover IMEX Domain")] \
        == [values[v] for v in range(6)]


# Xid 154 lines: gpu.c _gpuRefreshRecoveryActionInLock, "GPU recovery action changed from
# 0x%x (%s) to 0x%x (%s)" after kernel_rc.c's "NVRM: Xid (PCI:%04x:%02x:%02x): %d, "
XID154 = "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to "
LINE_CASES = [
    (XID154 + "0x1 (GPU Reset Required)", "reset_gpu",
     "NVSentinel's syslog parser test (RecommendedAction COMPONENT_RESET); A100 memory error "
     "management: 'reset the GPU using nvidia-smi -r'"),
    (XID154 + "0x2 (Node Reboot Required)", "reboot", "gpu.c; 'Reboot the operating system'"),
    (XID154 + "0x3 (Drain P2P)", "drain_p2p",
     "gpu.c; 'Terminate all GPU processes that conduct peer-to-peer traffic'"),
    (XID154 + "0x4 (Drain and Reset)", "reset_gpu", "gpu.c 570+; NVML 'Drain P2P and Reset Gpu'"),
    (XID154 + "0x5 (Recover IMEX Domain)", "nvlink", "gpu.c 595+"),
    ("NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
     "Required) to 0x0 (None)", "ignore", "gpu.c: the GPU was reset, no action is needed"),
    (XID154 + "0x7 (System Reboot)", "reboot",
     "a name this driver does not print, by nvml.h's value GPU_RECOVERY_ACTION_SYSTEM_REBOOT"),
    (XID154 + "0x6 (Bus Reset)", "unknown", "nvml.h GPU_RECOVERY_ACTION_BUS_RESET: not "
                                            "nvidia-smi's reset"),
    (XID154 + "0x9 (Something New)", "unknown", "neither a name nor a value the file knows"),
    # real: github.com/NVIDIA/open-gpu-kernel-modules/issues/1045 (595.45.04) and #446
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
     "(GPU Reset Required)", "reset_gpu", "open-gpu-kernel-modules#1045 (595.45.04)"),
    ("NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
     "(GPU Reset Required)", "reset_gpu", "open-gpu-kernel-modules#446 (2026-04)"),
    # kernel_rc.c: a 45 names the Xid that caused it (" caused by previous Xid %d")
    ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
     "previous Xid 149", "ignore", "open-gpu-kernel-modules#1150 (590.48.01): Xid 149 is "
                                   "counted by its own code"),
    ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001", "restart_app",
     "kernel_rc.c without the cause (drivers before it printed one)"),
]


@pytest.mark.parametrize(("line", "action", "origin"), LINE_CASES,
                         ids=[c[0][28:90] for c in LINE_CASES])
def test_an_xid_line_that_names_its_action_takes_it(line: str, action: str,
                                                    origin: str) -> None:
    found = xid_of(line)
    assert found is not None and found[2] == action, origin


def test_a_process_name_cannot_name_a_recovery_action() -> None:
    # the name (pid=, name=, before the driver's message) cannot end the line: the
    # driver's own message does, and it names no recovery action here
    line = ("NVRM: Xid (PCI:0000:01:00): 154, pid=7, name=x) to 0x2 (Node, GPU recovery "
            "action changed")
    assert xid_of(line) == ("0000:01:00", 154, "unknown")
    line = "NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=by previous Xid 1, Ch 00000001"
    assert xid_of(line) == ("0000:dc:00", 45, "restart_app")


@pytest.mark.parametrize(("text", "error"), [
    ('[action]\nreplace_gpu = [1]', "unknown Xid action"),
    ('[action]\nreset_gpu = [0]', "is not an Xid code"),
    ('[action]\nreset_gpu = ["48"]', "is not an Xid code"),
    ('[action]\nreset_gpu = [48]\nreboot = [48]', "listed under reset_gpu and reboot"),
])
def test_a_malformed_catalog_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(text)


@pytest.mark.parametrize(("text", "error"), [
    ('[recovery_action]\n"GPU Reset Required" = "reset"', "unknown Xid action"),
    ('[recovery_action_value]\nx = "reboot"', "is not a value"),
    ('recovery_action = 3', "is not a table"),
])
def test_a_malformed_recovery_table_is_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_recovery(text)
