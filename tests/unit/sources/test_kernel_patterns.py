"""Every shipped kernel-log pattern against lines built from the format strings of the
code that prints them: each ENA driver release's reset path (amzn/amzn-drivers
kernel/linux/ena, tags ena_linux_1.1.2 .. ena_linux_2.17.0; the in-tree driver
drivers/net/ethernet/amazon/ena before and after its 6.9 rework, "net: ena: Add more
information on TX timeouts"), the kernel's own messages, and node-problem-detector's
kernel monitor (config/kernel-monitor.json, readonly-monitor.json and its sample logs in
test/kernel_log_generator/problems). The format string and its origin sit beside each
case; a line is the printing function's prefix plus the format with its conversions
filled in. Then the shipped rules: each line, read by the real kmsg source from a
recording, fires the rule meant for it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.kernel_patterns import SHIPPED, xid_of
from guardian.sources.kernel_usertext import MASK, mask
from guardian.sources.kmsg import KmsgSource
from tests.support.checkout import REPO

# How each printing function begins a line (drivers/base/core.c dev_printk_emit: "%s %s:
# "; net/core/dev.c __netdev_printk: "%s %s %s%s: "; pr_fmt KBUILD_MODNAME ": ").
PREFIX = {
    "dev_err": "ena 0000:00:05.0: ",
    "netdev_err": "ena 0000:00:05.0 eth0: ",
    "netdev_err_unregistered": "ena 0000:00:05.0 (unnamed net_device) (uninitialized): ",
    "pr_err": "ena: ",
    "none": "",
}
_CONVERSION = re.compile(r"%(?:[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z)?[diuxXsc]|p[SsVgx]?|%)")


def fill(fmt: str) -> str:
    """A format string with each conversion replaced by a value of its kind."""
    def value(m: re.Match[str]) -> str:
        conv = m[0]
        if conv == "%%":
            return "%"
        if conv.endswith("s"):
            return "sda1" if conv == "%s" else "ena_io_poll+0x1a/0x100"
        if conv.endswith(("x", "X", "p")) or conv.startswith("%p"):
            return "0000000000000078" if conv.startswith("%p") else "1f"
        return "3"
    return _CONVERSION.sub(value, fmt)


# (pattern, printer, format string, origin)
ENA_CASES = [
    # ena_tx_timeout (ndo_tx_timeout)
    ("ena_tx_paused", "netdev_err", "Transmit time out",
     "amzn-drivers ena_netdev.c ena_tx_timeout, netif_err, 1.1.2-2.7.1; in-tree before 6.9"),
    ("ena_tx_paused", "netdev_err", "TX q %d is paused for too long (threshold %u). Time "
     "since last napi %u usec. napi scheduled: %d", "ena_netdev.c 2.7.2-2.11.1; in-tree 6.9+"),
    ("ena_tx_paused", "netdev_err", "TX q %d is paused for too long (threshold %u). Time "
     "since last napi %u usec. napi scheduled: %d. msecs since last interrupt: %u",
     "ena_netdev.c 2.2.12-2.16.1"),
    ("ena_tx_paused", "netdev_err", "TX q %d is paused for too long (threshold %u). usecs "
     "since napi %u. napi scheduled: %d. napi CPU: %d. msecs since interrupt: %u",
     "ena_netdev.c 2.17.0"),
    ("ena_tx_paused", "netdev_err", "TX timeout on invalid queue %u", "ena_netdev.c 2.2.12+"),
    ("ena_poll_starvation", "netdev_err",
     "napi handler hasn't been called for a long time but is scheduled",
     "ena_netdev.c ena_tx_timeout 2.2.12-2.17.0; in-tree 6.9+"),
    # check_missing_comp_in_tx_queue
    ("ena_tx_missing_completion", "netdev_err",
     "Found a Tx that wasn't completed on time, qid %d, index %d.",
     "ena_netdev.c netif_notice 1.1.2-2.4.1"),
    ("ena_tx_missing_completion", "netdev_err",
     "Found a Tx that wasn't completed on time, qid %d, index %d. %u usecs have passed "
     "since last napi execution. Missing Tx timeout value %u msecs",
     "ena_netdev.c 2.5.0-2.7.1; in-tree before 6.9"),
    ("ena_tx_missing_completion", "netdev_err",
     "TX hasn't completed, qid %d, index %d. %u usecs from last napi execution, napi "
     "scheduled: %d", "ena_netdev.c 2.7.2-2.8.9; in-tree 6.9+"),
    ("ena_tx_missing_completion", "netdev_err",
     "TX hasn't completed, qid %d, index %d. %u msecs since last interrupt, %u msecs since "
     "last napi execution, napi scheduled: %d", "ena_netdev.c 2.2.12-2.16.1"),
    ("ena_tx_missing_completion", "netdev_err",
     "TX hasn't completed, qid: %d, index: %d, %u msecs since interrupt, %u msecs since "
     "napi, napi scheduled: %d", "ena_netdev.c netif_dbg 2.17.0"),
    ("ena_tx_missing_completion", "netdev_err",
     "[1/2] %d new missed TX completions, qid: %d, %u msecs since interrupt, %u msecs since "
     "napi, napi scheduled: %d", "ena_netdev.c netif_notice 2.17.0"),
    ("ena_tx_lost_completions", "netdev_err",
     "The number of lost tx completion is above the threshold (%d > %d). Reset the device",
     "ena_netdev.c 1.1.2-1.1.3"),
    ("ena_tx_lost_completions", "none", "ens5: The number of lost tx completions is above the "
     "threshold (%d > %d). Reset the device", "as amzn-drivers#163 quotes it (driver 2.4.0g): "
     "from the interface name on"),
    ("ena_tx_missing_completion", "none", "ens5: TX hasn't completed, qid %d, index %d. %u "
     "usecs from last napi execution, napi scheduled: %d", "ena_netdev.c 2.7.2-2.8.9, quoted "
     "from the interface name on"),
    ("ena_tx_lost_completions", "netdev_err",
     "The number of lost tx completions is above the threshold (%d > %d). Reset the device",
     "ena_netdev.c 1.2.0-2.7.1; in-tree before 6.9"),
    ("ena_tx_lost_completions", "netdev_err",
     "Lost TX completions are above the threshold (%d > %d). Completion transmission "
     "timeout: %u.", "ena_netdev.c 2.7.2-2.8.9; in-tree 6.9+"),
    ("ena_tx_lost_completions", "netdev_err",
     "Lost TX completions are above the threshold (%d > %d). Completion transmission "
     "timeout: %u (msec). %u msecs since last interrupt, %u msecs since last napi "
     "execution.", "ena_netdev.c 2.2.12-2.15.0"),
    ("ena_tx_lost_completions", "netdev_err",
     "Lost TX completions are above the threshold (%d > %d). Completion transmission "
     "timeout: %u (msec). %u msecs since last interrupt, %u msecs since last napi "
     "execution. qid %d.", "ena_netdev.c 2.16.0-2.16.1"),
    ("ena_tx_lost_completions", "netdev_err",
     "[1/2] Lost TX completions are above threshold (%d > %d), completion timeout: %u "
     "(msec), %u msecs since interrupt, %u msecs since napi, qid: %d", "ena_netdev.c 2.17.0"),
    # keep-alive and admin queue
    ("ena_keep_alive_timeout", "netdev_err", "Keep alive watchdog timeout.",
     "ena_netdev.c check_for_missing_keep_alive 1.1.2-2.11.1; in-tree"),
    ("ena_keep_alive_timeout", "netdev_err",
     "Keep alive watchdog timeout, %u msecs since last keep alive.", "ena_netdev.c 2.12.0+"),
    ("ena_admin_queue_timeout", "netdev_err", "ENA admin queue is not in running state!",
     "ena_netdev.c check_for_admin_com_state 1.1.2-2.17.0; in-tree"),
    ("ena_admin_queue_timeout", "netdev_err", "FW isn't responsive, skipping reset routine",
     "ena_netdev.c 2.2.12-2.17.0"),
    ("ena_admin_queue_timeout", "pr_err",
     "The ena device doesn't send any completion for the admin cmd %d status %d",
     "ena_com.c pr_err 1.1.2-2.1.0"),
    ("ena_admin_queue_timeout", "pr_err",
     "The ena device didn't send a completion for the admin cmd %d status %d",
     "ena_com.c pr_err 2.1.1-2.2.10"),
    ("ena_admin_queue_timeout", "netdev_err_unregistered",
     "The ena device didn't send a completion for the admin cmd %d status %d",
     "ena_com.c netdev_err 2.2.12-2.17.0 (at probe, before the netdev has a name)"),
    ("ena_admin_queue_timeout", "pr_err", "Wait for completion (polling) timeout",
     "ena_com.c 1.1.2-2.2.10"),
    ("ena_admin_queue_timeout", "dev_err", "Reg read timeout occurred", "ena_com.c 2.2.11"),
    ("ena_admin_queue_timeout", "netdev_err",
     "Reading reg failed for timeout. expected: req id[%u] offset[%u] actual: req id[%u] "
     "offset[%u]", "ena_com.c 2.2.12-2.17.0"),
    ("ena_admin_queue_error", "pr_err", "admin command failed[%u]", "ena_com.c 1.1.2-2.2.10"),
    ("ena_admin_queue_error", "netdev_err", "Admin command failed[%u]",
     "ena_com.c 2.2.12-2.16.1"),
    ("ena_admin_queue_error", "netdev_err", "Admin command %u failed (%u)",
     "ena_com.c 2.17.0"),
    ("ena_admin_queue_error", "netdev_err", "Command was aborted", "ena_com.c 1.1.2-2.17.0"),
    ("ena_admin_queue_error", "netdev_err", "Failed to submit command [%d]",
     "ena_com.c 2.2.12-2.17.0"),
    ("ena_admin_queue_error", "netdev_err", "Failed to process command [%d]",
     "ena_com.c 2.13.0-2.17.0"),
    ("ena_admin_queue_error", "pr_err", "Failed to process command. ret = %d",
     "ena_com.c 1.1.2-2.2.10"),
    # interrupts
    ("ena_msix_issue", "netdev_err", "Potential MSIX issue on Rx side Queue = %d. Reset the "
     "device", "ena_netdev.c check_for_rx_interrupt_queue 1.5.0-2.17.0"),
    ("ena_msix_issue", "netdev_err", "Potential MSIX issue on Tx side Queue = %d. Reset the "
     "device", "ena_netdev.c 1.5.0-2.15.0"),
    ("ena_msix_issue", "netdev_err", "Potential MSIX issue on Tx side Queue = %d.",
     "ena_netdev.c 2.16.0-2.17.0"),
    ("ena_msix_issue", "pr_err", "The ena device have completion but the driver didn't "
     "receive any MSI-X interrupt (cmd %d)", "ena_com.c 1.1.2-2.0.3"),
    ("ena_msix_issue", "netdev_err", "The ena device sent a completion but the driver "
     "didn't receive a MSI-X interrupt (cmd %d), autopolling mode is %s",
     "ena_com.c 2.1.1-2.17.0"),
    ("ena_unhealthy_reset_request", "netdev_err",
     "The device has detected an unhealthy state, reset is requested",
     "ena_netdev.c ena_notification 2.2.12-2.17.0"),
    # the reset itself
    ("ena_reset_triggered", "netdev_err", "Trigger reset is on",
     "ena_netdev.c ena_fw_reset_device 1.1.2-2.17.0; in-tree"),
    ("ena_reset_completed", "dev_err", "Device reset completed successfully",
     "ena_netdev.c ena_restore_device 1.1.2-1.6.0; in-tree"),
    ("ena_reset_completed", "dev_err", "Device reset completed successfully, Driver info: %s",
     "ena_netdev.c ena_restore_device 2.0.2-2.13.0"),
    ("ena_reset_completed", "dev_err",
     "Device reset completed, status: 0, Driver info: Elastic Network Adapter (ENA) v2.17.0g",
     "ena_netdev.c ena_fw_reset_device 2.13.1+ ('status: %d, Driver info: %s', status 0)"),
    ("ena_reset_failed", "dev_err", "Reset attempt failed. Can not reset the device",
     "ena_netdev.c ena_restore_device 1.1.2-2.16.1 (dev_err); in-tree"),
    ("ena_reset_failed", "netdev_err", "Reset attempt failed. Can not reset the device",
     "ena_netdev.c ena_restore_device 2.17.0 (netif_err)"),
    ("ena_reset_failed", "dev_err",
     "Device reset completed, status: -5, Driver info: Elastic Network Adapter (ENA) v2.17.0g",
     "ena_netdev.c ena_fw_reset_device 2.13.1+ ('status: %d', a failure; reset_fail counts it)"),
    ("ena_reset_failed", "dev_err", "Can not reset device",
     "ena_netdev.c ena_device_init, dev_err 1.5.0-2.17.0"),
    ("ena_reset_failed", "dev_err", "Device reset failed",
     "ena_netdev.c ena_destroy_device, dev_err 1.5.0-2.2.10"),
    ("ena_reset_failed", "netdev_err", "Device reset failed",
     "ena_netdev.c ena_destroy_device, netif_err 2.2.11-2.17.0"),
    ("ena_reset_failed", "dev_err", "Restore attempt failed.",
     "ena_netdev.c ena_restore_device, dev_err 2.17.0"),
    ("ena_init_failed", "dev_err", "ena device init failed",
     "ena_netdev.c ena_probe, dev_err 1.5.0-2.2.10"),
    ("ena_init_failed", "dev_err", "Can not initialize device",
     "ena_netdev.c ena_device_init, dev_err 1.5.0-2.17.0"),
    ("ena_tx_paused", "netdev_err", "timeout was called, but no offending queue was found",
     "ena_netdev.c ena_tx_timeout, netdev_warn 2.7.2-2.17.0 (kernels before 5.6)"),
    ("ena_reset_triggered", "netdev_err", "Resetting the device",
     "ena_netdev.c check_missing_comp_in_tx_queue, netif_err 2.7.2-2.17.0; in-tree 6.9+"),
    # other NIC drivers (their own prefixes: dev_err / netdev_err of each driver)
    ("nic_hang_reset", "none", "e1000e 0000:00:19.0 eth0: Detected Hardware Unit Hang:",
     "drivers/net/ethernet/intel/e1000e/netdev.c e1000_print_hw_hang"),
    ("nic_hang_reset", "none", "igb 0000:09:00.0: Detected Tx Unit Hang",
     "drivers/net/ethernet/intel/igb/igb_main.c igb_clean_tx_irq, dev_err"),
    ("nic_hang_reset", "none", "ixgbe 0000:08:00.1: eth3: tx hang 1 detected on queue 2, "
     "resetting adapter", "drivers/net/ethernet/intel/ixgbe/ixgbe_main.c, e_err"),
    ("nic_hang_reset", "none", "ixgbe 0000:01:00.1 eth1: Reset adapter",
     "ixgbe_main.c ixgbe_reset_subtask, e_warn"),
    ("nic_hang_reset", "none", "i40e 0000:60:00.0: TX driver issue detected, PF reset issued",
     "drivers/net/ethernet/intel/i40e/i40e_main.c i40e_tx_timeout"),
    ("nic_hang_reset", "none", "mlx5_core 0000:08:00.0 eth2: TX timeout on queue: 3, SQ: "
     "0x1a7, CQ: 0x4e8, SQ Cons: 0x0 SQ Prod: 0x3, usecs since last trans: 14164000",
     "drivers/net/ethernet/mellanox/mlx5/core/en_main.c mlx5e_tx_timeout_work"),
    ("nic_hang_reset", "none", "bnxt_en 0000:04:00.0 eth0: TX timeout detected, starting "
     "reset task!", "drivers/net/ethernet/broadcom/bnxt/bnxt.c bnxt_tx_timeout"),
    # the kernel's Tx watchdog, any driver
    ("nic_tx_timeout", "none", "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out",
     "net/sched/sch_generic.c dev_watchdog WARN_ONCE, to 6.2"),
    ("nic_tx_timeout", "none", "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out %u ms",
     "net/sched/sch_generic.c 6.3-6.6"),
    ("nic_tx_timeout", "netdev_err", "NETDEV WATCHDOG: CPU: %d: transmit queue %u timed out "
     "%u ms", "net/sched/sch_generic.c netdev_crit, 6.7+"),
]

KERNEL_CASES = [
    ("oom_kill", "Out of memory: Kill process %d (%s) score %u or sacrifice child",
     "mm/oom_kill.c oom_kill_process to 4.20 (the victim's choice, before its kill)"),
    ("oom_kill", "Killed process 21578, UID 503, (redis-server) total-vm:9100804kB, "
     "anon-rss:9066596kB, file-rss:64kB", "RHEL/CentOS 6 2.6.32 (a vendor patch)"),
    ("soft_lockup", "NMI watchdog: BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]",
     "kernel/watchdog.c pr_fmt 'NMI watchdog: ' 4.0-4.12 and RHEL 7's 3.10"),
    ("hard_lockup", "Watchdog CPU:%d Hard LOCKUP", "arch/powerpc/kernel/watchdog.c 4.13+"),
    ("hard_lockup", "CPU %d self-detected hard LOCKUP @ %pS",
     "arch/powerpc/kernel/watchdog.c watchdog_timer_interrupt"),
    ("rcu_stall", "INFO: rcu_sched_state detected stall on CPU %d (t=%lu jiffies)",
     "kernel/rcutree.c print_cpu_stall 2.6.3x-3.0"),
    ("rcu_stall", "INFO: rcu_sched detected stall on CPU 3", "kernel/rcutree.c 3.x"),
    ("kernel_bad_access", "BUG: unable to handle kernel paging request at %p",
     "arch/x86/mm/fault.c no_context to 4.19"),
    ("kernel_bad_access", "BUG: unable to handle page fault for address: %px",
     "arch/x86/mm/fault.c show_fault_oops 5.0+"),
    ("kernel_bad_access", "Unable to handle kernel paging request at virtual address "
     "ffff8000011d6008", "arch/arm64/mm/fault.c die_kernel_fault"),
    ("null_deref", "Unable to handle kernel NULL pointer dereference at virtual address "
     "0000000000000379", "arch/arm64/mm/fault.c and arch/arm/mm/fault.c"),
    ("kernel_oops", "Oops [#1]", "arch/riscv/kernel/traps.c die '%s [#%d]'"),
    ("kernel_oops", "Oops: Kernel access of bad area, sig: 11 [#1]",
     "arch/powerpc/kernel/traps.c die"),
    ("kernel_oops", "kernel BUG at %s:%d!", "include/asm-generic/bug.h BUG() via "
     "lib/bug.c report_bug 'kernel BUG at %s:%u!'"),
    ("ext4_error", "EXT4-fs (%s): I/O error while writing superblock",
     "fs/ext4/super.c ext4_commit_super"),
    ("ext4_error", "EXT4-fs (%s): error count since last fsck: %u",
     "fs/ext4/super.c print_daily_error_info"),
    ("ext4_error", "Aborting journal on device %s.", "fs/jbd2/journal.c jbd2_journal_abort"),
    ("ext4_error", "JBD2: Error %d detected when updating journal superblock for %s.",
     "fs/jbd2/journal.c jbd2_write_superblock"),
    ("xfs_shutdown", "XFS (%s): xfs_do_force_shutdown(0x%x) called from line %d of file "
     "%s.  Return address = %pS", "fs/xfs/xfs_fsops.c xfs_do_force_shutdown to 5.14"),
    ("xfs_shutdown", "XFS (%s): xfs_log_force: error %d returned.", "fs/xfs/xfs_log.c"),
    ("xfs_corruption", "XFS (%s): metadata I/O error in \"%pS\" at daddr 0x%llx len %d "
     "error %d", "fs/xfs/xfs_buf_item.c xfs_buf_ioerror_alert 5.6+"),
    ("xfs_corruption", "XFS (%s): metadata I/O error: block 0x%llx (\"%s\") error %d "
     "numblks %d", "fs/xfs/xfs_buf.c xfs_buf_ioerror_alert to 5.5"),
    ("xfs_corruption", "XFS: Internal error XFS_WANT_CORRUPTED_RETURN at line %d of file "
     "%s.  Caller 0x%p", "fs/xfs/xfs_error.c xfs_error_report with no mount (3.x)"),
    ("io_error", "attempt to access beyond end of device", "block/blk-core.c bio_check_eod"
     " to 5.9"),
    ("io_error", "nvme0n1: I/O Cmd(0x2) @ LBA 0, 8 blocks, I/O Error (sct 0x2 / sc 0x86) "
     "DNR ", "drivers/nvme/host/core.c nvme_log_error 5.18+"),
    ("io_error", "sd 1:0:0:0: [sda] tag#12 FAILED Result: hostbyte=DID_BAD_TARGET "
     "driverbyte=DRIVER_OK cmd_age=94s", "drivers/scsi/scsi_logging.c scsi_print_result"
     " 5.5+"),
    ("nvme_controller_reset", "nvme nvme0: I/O %d QID %d timeout, aborting",
     "drivers/nvme/host/pci.c nvme_timeout to 6.4"),
    ("nvme_controller_reset", "nvme nvme0: I/O tag 641 (c281) opcode 0x1 (I/O Cmd) QID 8 "
     "timeout, reset controller", "drivers/nvme/host/pci.c nvme_timeout 6.5+"),
    ("nvme_controller_reset", "nvme nvme0: controller is down; will reset: CSTS=0x%x, "
     "PCI_STATUS=0x%x", "drivers/nvme/host/pci.c nvme_warn_reset"),
    ("machine_check", "mce: [Hardware Error]: Machine check events logged",
     "arch/x86/kernel/cpu/mce/core.c mce_notify_irq (pr_fmt 'mce: ')"),
    ("machine_check", "mce: [Hardware Error]: CPU %d: Machine Check: %d Bank %d: "
     "a600000000020408", "arch/x86/kernel/cpu/mce/core.c print_mce"),
    ("pcie_aer_error", "pcieport 0000:00:1c.5: AER: Corrected error received: id=00e5",
     "drivers/pci/pcie/aer.c to 4.18"),
    ("pcie_aer_error", "pcieport 0000:00:1d.3: AER: Correctable error message received "
     "from 0000:06:00.0", "drivers/pci/pcie/aer.c aer_print_port_info (later kernels)"),
    ("pcie_aer_fatal", "pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: "
     "0000:00:03.0", "drivers/pci/pcie/aer.c 4.19-6.7"),
    ("cpu_thermal_throttling", "CPU%d: Core temperature above threshold, cpu clock "
     "throttled (total events = %lu)", "arch/x86/kernel/cpu/mce/therm_throt.c to 5.4"),
    ("cpu_thermal_throttling", "CPU%d: Package temperature is above threshold, cpu clock "
     "is throttled (total events = %lu)", "therm_throt.c 5.5+"),
    ("conntrack_table_full", "nf_conntrack: table full, dropping packet",
     "net/netfilter/nf_conntrack_core.c __nf_conntrack_alloc (3.x)"),
    ("conntrack_table_full", "nf_conntrack: nf_conntrack: table full, dropping packet",
     "nf_conntrack_core.c with pr_fmt (4.x+)"),
    ("pids_fork_rejected", "cgroup: fork rejected by pids controller in /kubepods/pod1",
     "kernel/cgroup/pids.c pids_event"),
    ("nfs_server_not_responding", "nfs: server %s not responding, still trying",
     "net/sunrpc/clnt.c call_timeout"),
    ("nfs_server_not_responding", "nfs: server %s not responding, timed out",
     "net/sunrpc/clnt.c call_timeout (soft mounts)"),
    ("nvidia_init_failed", "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
     "open-gpu-kernel-modules osinit.c"),
    ("nvidia_init_failed", "NVRM: rm_init_adapter failed for device bearing minor number %d",
     "the closed driver's nv.c (358.x)"),
    ("nvidia_init_failed", "nvidia: probe of 0000:06:00.0 failed with error -1",
     "drivers/base/dd.c really_probe to 6.9"),
    ("nvidia_init_failed", "nvidia 0000:01:00.0: probe with driver nvidia failed with error "
     "-1", "drivers/base/dd.c 6.10+"),
    ("oom_kill", "Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB",
     "mm/oom_kill.c 2.6.x-4.4"),
    ("oom_kill", "Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, "
     "shmem-rss:%lukB", "mm/oom_kill.c 4.5-5.0; node-problem-detector problems/oom_kill"),
    ("oom_kill", "Out of memory: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, "
     "file-rss:%lukB, shmem-rss:%lukB, UID:%u pgtables:%lukB oom_score_adj:%hd",
     "mm/oom_kill.c __oom_kill_process 5.1+ (message 'Out of memory')"),
    ("oom_kill", "Out of memory (oom_kill_allocating_task): Killed process %d (%s) "
     "total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB",
     "mm/oom_kill.c out_of_memory with oom_kill_allocating_task"),
    ("oom_kill oom_kill_memcg", "Memory cgroup out of memory: Killed process %d (%s) "
     "total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB, shmem-rss:%lukB, UID:%u",
     "mm/oom_kill.c 5.1+ (message 'Memory cgroup out of memory')"),
    ("oom_kill oom_kill_memcg", "Memory cgroup out of memory: Kill process %d (%s) score %u or "
     "sacrifice child", "mm/oom_kill.c oom_kill_process to 5.0; node-problem-detector "
     "problems/oom_kill"),
    ("hung_task", "INFO: task %s:%d blocked for more than %ld seconds.",
     "kernel/hung_task.c check_hung_task"),
    ("hung_task", "INFO: task docker:20744 blocked for more than 120 "
     "seconds.", "node-problem-detector problems/docker_hung (DockerHung)"),
    ("null_deref", "BUG: unable to handle kernel NULL pointer dereference at "
     "%p", "arch/x86/mm/fault.c to 4.19; node-problem-detector problems/null_pointer"),
    ("null_deref", "BUG: kernel NULL pointer dereference, address: %px",
     "arch/x86/mm/fault.c show_fault_oops 4.20+"),
    ("kernel_oops", "Oops: 0000 [#1] SMP", "arch/x86/kernel/dumpstack.c __die_header "
     "'%s: %04lx [#%d]%s%s%s%s%s' with str 'Oops', to 6.8"),
    ("kernel_oops", "Oops: Oops: 0002 [#1] PREEMPT SMP NOPTI",
     "arch/x86/kernel/dumpstack.c __die_header 'Oops: %s: %04lx [#%d]...' 6.9+"),
    ("kernel_oops", "divide error: 0000 [#1] SMP ",
     "__die_header str 'divide error'; node-problem-detector problems/divide_zero"),
    ("kernel_oops", "invalid opcode: 0000 [#1] PREEMPT SMP", "__die_header 'invalid opcode'"),
    ("kernel_oops", "Internal error: Oops: 0000000096000004 [#1] PREEMPT SMP",
     "arch/arm64/kernel/traps.c die: 'Internal error: %s: %016lx [#%d]...'"),
    ("kernel_oops general_protection_fault", "general protection fault: 0000 [#1] SMP",
     "arch/x86/kernel/traps.c to 5.3"),
    ("kernel_oops general_protection_fault", "general protection fault, probably for "
     "non-canonical address 0xdead000000000100: 0000 [#1] SMP NOPTI",
     "arch/x86/kernel/traps.c die_addr 5.4-6.8"),
    ("kernel_oops general_protection_fault", "Oops: general protection fault, probably for "
     "non-canonical address 0xdffffc0000000000: 0000 [#1] PREEMPT SMP KASAN NOPTI",
     "__die_header 6.9+"),
    ("unregister_netdevice", "unregister_netdevice: waiting for %s to become free. Usage "
     "count = %d", "net/core/dev.c netdev_wait_allrefs(_any); node-problem-detector "
     "problems/unregister_netdevice"),
    ("ext4_error", "EXT4-fs error (device %s): %s:%d: inode #%lu: comm %s: bad extra_isize",
     "fs/ext4/super.c __ext4_error_inode"),
    ("ext4_warning", "EXT4-fs warning (device %s): %s:%d: Directory index full!",
     "fs/ext4/super.c __ext4_warning"),
    ("fs_readonly", "EXT4-fs (sda1): Remounting filesystem read-only",
     "fs/ext4/super.c ext4_handle_error via ext4_msg; node-problem-detector "
     "problems/readonly_filesystem"),
    ("fs_readonly", "EXT3-fs (sda1): error: remounting filesystem read-only",
     "fs/ext3/super.c ext3_handle_error (to 4.2)"),
    ("fs_readonly", "BTRFS info (device sda1): forced readonly",
     "fs/btrfs/messages.c __btrfs_handle_fs_error"),
    ("xfs_shutdown", "XFS (%s): Corruption of in-memory data detected.  Shutting down "
     "filesystem", "fs/xfs/xfs_fsops.c xfs_do_force_shutdown to 5.x"),
    ("xfs_shutdown", "XFS (%s): Log I/O Error Detected. Shutting down filesystem",
     "fs/xfs/xfs_fsops.c to 5.x"),
    ("xfs_shutdown", "XFS (%s): Corruption of in-memory data (0x%x) detected at %pS (%s:%d)."
     "  Shutting down filesystem.", "fs/xfs/xfs_fsops.c 6.x"),
    ("xfs_shutdown", "XFS (%s): Filesystem has been shut down due to log error (0x%x).",
     "fs/xfs/xfs_fsops.c 6.x"),
    ("xfs_corruption", "XFS (%s): Metadata corruption detected at %pS, %s block 0x%llx",
     "fs/xfs/xfs_error.c xfs_verifier_error"),
    ("xfs_corruption", "XFS (%s): Internal error %s at line %d of file %s.  Caller %pS",
     "fs/xfs/xfs_error.c xfs_error_report"),
    ("io_error", "Buffer I/O error on dev %pg, logical block %llu, lost async page write",
     "fs/buffer.c end_buffer_async_write 4.10+"),
    ("io_error", "Buffer I/O error on device %s, logical block %llu",
     "fs/buffer.c buffer_io_error to 4.9"),
    ("io_error", "blk_update_request: I/O error, dev %s, sector %llu",
     "block/blk-core.c blk_update_request 4.x"),
    ("io_error", "I/O error, dev sda, sector 2048 op 0x1:(WRITE) flags 0x800 phys_seg 1 "
     "prio class 2", "block/blk-core.c blk_print_req_error 5.16+"),
    ("io_error", "critical medium error, dev sdb, sector 4096 op 0x0:(READ) flags 0x0 "
     "phys_seg 1 prio class 0", "block/blk-core.c blk_errors[] names"),
    ("memory_error_corrected", "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan"
     "#1_DIMM#0 (channel:1 slot:0 page:0x12345 offset:0x0 grain:32 syndrome:0x0)",
     "drivers/edac/edac_mc.c edac_ce_error 'EDAC MC%d: %d CE %s%son %s (...)'; "
     "node-problem-detector MemoryReadError 'CE memory read error .*'"),
    ("memory_error_uncorrected", "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_"
     "Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345 offset:0x0 grain:32)",
     "drivers/edac/edac_mc.c edac_ue_error"),
    ("cper_corrected", "{1}[Hardware Error]: event severity: corrected",
     "drivers/firmware/efi/cper.c cper_print_hdr, GHES prefix '{%u}' HW_ERR"),
    ("cper_recoverable", "{2}[Hardware Error]: event severity: recoverable",
     "drivers/firmware/efi/cper.c"),
    ("cper_fatal", "[Hardware Error]: event severity: fatal",
     "drivers/firmware/efi/cper.c (no sequence prefix)"),
    ("soft_lockup", "BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]",
     "kernel/watchdog.c to 4.12"),
    ("soft_lockup", "watchdog: BUG: soft lockup - CPU#%d stuck for %us! [%s:%d]",
     "kernel/watchdog.c pr_fmt 'watchdog: ' 4.13+"),
    ("hard_lockup", "NMI watchdog: Watchdog detected hard LOCKUP on cpu %d",
     "kernel/watchdog_hld.c"),
    ("hard_lockup", "watchdog: Watchdog detected hard LOCKUP on cpu %u",
     "kernel/watchdog.c watchdog_hardlockup_check 6.6+"),
    ("rcu_stall", "INFO: rcu_sched detected stalls on CPUs/tasks:",
     "kernel/rcu/tree.c print_other_cpu_stall to 4.19"),
    ("rcu_stall", "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
     "kernel/rcu/tree_stall.h 4.20+"),
    ("rcu_stall", "INFO: rcu_bh self-detected stall on CPU", "kernel/rcu/tree.c print_cpu_stall"),
    ("rcu_stall", "rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: {",
     "kernel/rcu/tree_exp.h synchronize_rcu_expedited_wait"),
    ("rcu_stall", "INFO: rcu_tasks detected stalls on tasks:",
     "kernel/rcu/tasks.h check_all_holdout_tasks"),
    ("kernel_panic", "Kernel panic - not syncing: Fatal exception in interrupt",
     "kernel/panic.c panic"),
    ("nvidia_xid", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen "
     "off the bus.", "open-gpu-kernel-modules kernel_rc.c 'NVRM: Xid (PCI:%04x:%02x:%02x): "
     "%d, pid=%s, name=%s, %s'"),
    ("nvidia_xid", "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 43, pid=99, name=train, "
     "Ch 00000008", "kernel_rc.c, MIG attribution"),
    ("nvidia_xid", "NVRM: Xid (0000:03:00): 14, Channel 00000001", "older drivers"),
    # Xid 154 names the GPU's new recovery action (gpu.c _gpuRefreshRecoveryActionInLock:
    # "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)", 565+)
    ("nvidia_xid", "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 "
     "(None) to 0x1 (GPU Reset Required)", "gpu.c; NVSentinel's parser test: a GPU reset"),
    ("nvidia_xid", "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 "
     "(None) to 0x2 (Node Reboot Required)", "gpu.c: a reboot"),
    ("nvidia_xid", "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 "
     "(None) to 0x3 (Drain P2P)", "gpu.c: drain peer-to-peer traffic"),
    ("nvidia_xid", "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x1 "
     "(GPU Reset Required) to 0x0 (None)", "gpu.c: after the reset, nothing"),
    ("nvidia_xid", "NVRM: Xid (PCI:0000:3b:00): 162, %s", "nverror.h ISINK_REENGAGED: the "
     "catalog gives it no action (unknown)"),
    ("nvswitch_sxid_fatal", "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): %05d, Fatal, "
     "Link %02d %s%s", "open-gpu-kernel-modules common_nvswitch.h NVSWITCH_PRINT_SXID "
     "'nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, ' + the fatal report's 'Fatal, Link "
     "%02d %s%s'"),
    ("nvswitch_sxid_nonfatal", "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): %05d, Non-fatal, "
     "Link %02d %s", "error_nvswitch.h NVSWITCH_REPORT_NONFATAL_LINK 'Non-fatal, Link %02d '"),
    ("nvswitch_sxid_detail", "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): %05d, Severity %d "
     "Engine instance %02d Sub-engine instance %02d", "a report's continuation after "
     "NVSWITCH_PRINT_SXID's prefix (570.x: canonical/tdx#414)"),
    ("nvswitch_sxid_detail", "nvidia-nvswitch0: SXid (PCI:0000:06:00.0): %05d, Data {0x%08x, "
     "0x%08x, 0x%08x}", "a report's data words (570.x: canonical/tdx#414)"),
    # btrfs (fs/btrfs/messages.c btrfs_printk: 'BTRFS %s (device %s%s): %pV')
    ("btrfs_error", "BTRFS error (device %s): bdev %s errs: wr %u, rd %u, flush %u, corrupt %u, "
     "gen %u", "fs/btrfs/volumes.c btrfs_dev_stat_print_on_error (btrfs_err_rl_in_rcu)"),
    # the same counters printed at mount, when one is non-zero: past errors, a warning
    ("btrfs_dev_stats_at_mount", "BTRFS info (device %s): bdev %s errs: wr %u, rd %u, flush %u, "
     "corrupt %u, gen %u", "volumes.c btrfs_dev_stat_print_on_load (btrfs_info_in_rcu; "
     "btrfs_info 6.15+): at mount, when a counter is non-zero"),
    ("btrfs_dev_stats_at_mount", "BTRFS info (device %s: state M): bdev %s errs: wr %u, rd %u, "
     "flush %u, corrupt %u, gen %u", "the same, the filesystem's state in the device (5.x+)"),
    ("btrfs_error", "btrfs: bdev %s errs: wr %u, rd %u, flush %u, corrupt %u, gen %u",
     "volumes.c 3.5-3.13 (printk_ratelimited KERN_ERR 'btrfs: ...')"),
    ("btrfs_error", "BTRFS: error (device %s: state EA) in %s:%d: errno=%d %s",
     "fs/btrfs/messages.c __btrfs_handle_fs_error 'BTRFS: error (device %s%s) in %s:%d: "
     "errno=%d %s' (': state %s' 5.x+)"),
    ("btrfs_error", "BTRFS: Transaction aborted (error %d)",
     "fs/btrfs/transaction.h btrfs_abort_transaction (WARN)"),
    ("btrfs_error", "BTRFS warning (device %s): csum failed root %lld ino %llu off %llu csum "
     "0x%08x expected csum 0x%08x mirror %d", "fs/btrfs/inode.c btrfs_print_data_csum_error"),
    ("btrfs_error", "BTRFS warning (device %s): checksum verify failed on logical %llu mirror "
     "%u wanted 0x%08x found 0x%08x level %d", "fs/btrfs/disk-io.c btrfs_validate_extent_buffer"
     " 5.x+ (btrfs_warn_rl)"),
    ("btrfs_error", "BTRFS critical (device %s): corrupt leaf: root=%llu block=%llu slot=%d, "
     "%pV", "fs/btrfs/tree-checker.c generic_err (btrfs_crit)"),
    ("btrfs_error", "btrfs csum failed ino %llu off %llu csum %u private %llu",
     "fs/btrfs/inode.c 3.x (printk_ratelimited, no device)"),
    ("btrfs_error", "parent transid verify failed on %llu wanted %llu found %llu",
     "fs/btrfs/disk-io.c verify_parent_transid 3.x (printk_ratelimited, no prefix)"),
    ("btrfs_error_corrected", "BTRFS info (device %s): read error corrected: ino %llu off %llu "
     "(dev %s sector %llu)", "fs/btrfs/bio.c / extent_io.c repair_io_failure "
     "(btrfs_info_rl_in_rcu)"),
    ("btrfs_error_corrected", "BTRFS error (device %s): fixed up error at logical %llu on dev %s",
     "fs/btrfs/scrub.c (btrfs_err_rl_in_rcu): a scrub repaired a block from a good copy"),
    # EDAC before 3.5, memory failure (hwpoison)
    ("memory_error_corrected", "EDAC MC0: CE page 0x%lx, offset 0x%lx, grain %d, syndrome "
     "0x%lx, row %d, channel %d, label \"%s\": %s", "drivers/edac/edac_mc.c edac_mc_handle_ce "
     "to 3.4"),
    ("memory_error_corrected", "EDAC MC0: CE - no information available: %s",
     "edac_mc.c edac_mc_handle_ce_no_info to 3.4"),
    ("memory_error_uncorrected", "EDAC MC0: UE page 0x%lx, offset 0x%lx, grain %d, row %d, "
     "labels \"%s\": %s", "drivers/edac/edac_mc.c edac_mc_handle_ue to 3.4"),
    ("memory_failure", "Memory failure: 0x1a6c31: recovery action for dirty LRU page: Recovered",
     "mm/memory-failure.c action_result 'Memory failure: %#lx: recovery action for %s: %s' "
     "(pr_fmt, 4.x+)"),
    ("memory_failure", "MCE 0x1a6c31: dirty LRU page recovery: Recovered",
     "mm/memory-failure.c action_result 2.6.32-3.x 'MCE %#lx: %s page recovery: %s'"),
    ("memory_failure", "mce: Uncorrected hardware memory error in user-access at %llx",
     "arch/x86/kernel/cpu/mce/core.c kill_me_maybe (pr_fmt 'mce: ')"),
    # machine checks: AMD's decoder; a report's detail lines
    ("machine_check", "[Hardware Error]: Corrected error, no action required.",
     "drivers/edac/mce_amd.c amd_decode_mce (HW_ERR)"),
    ("machine_check", "[Hardware Error]: CPU:%d (%x:%x:%x) MC%d_STATUS[%s|CE|MiscV|AddrV|-|-"
     "|SyndV|CECC|-|-|-]: 0x%016llx", "drivers/edac/mce_amd.c decode_smca_error / "
     "amd_decode_mce"),
    ("hardware_error_detail", "mce: [Hardware Error]: TSC %llx ADDR %llx MISC %llx",
     "arch/x86/kernel/cpu/mce/core.c __print_mce 'TSC %llx ', 'ADDR %llx ', 'MISC %llx ' "
     "(one record: pr_cont)"),
    ("hardware_error_detail", "mce: [Hardware Error]: Run the above through 'mcelog --ascii'",
     "mce/core.c print_mce"),
    ("hardware_error_detail", "{1}[Hardware Error]: It has been corrected by h/w and requires "
     "no further action", "drivers/acpi/apei/ghes.c __ghes_print_estatus"),
    ("hardware_error_detail", "{3}[Hardware Error]:   section_type: PCIe error",
     "drivers/firmware/efi/cper.c cper_estatus_print_section"),
    ("hardware_error_detail", "EDAC skx MC0: HANDLING MCE MEMORY ERROR",
     "drivers/edac/skx_common.c skx_mce_output_error (skx_mc_printk KERN_DEBUG)"),
    ("hardware_error_detail", "EDAC sbridge MC1: TSC 0 ", "drivers/edac/sb_edac.c "
     "sbridge_mce_output_error 'TSC %llx '"),
    ("hardware_error_detail", "pcieport 0000:00:03.0: AER: aer_status: 0x00000040, aer_mask: "
     "0x00000000", "drivers/pci/pcie/aer.c pci_print_aer (firmware first, via GHES)"),
    ("hardware_error_detail", "pcieport 0000:00:03.0: AER: aer_layer=Transaction Layer, "
     "aer_agent=Requester ID", "aer.c pci_print_aer"),
    ("hardware_error_detail", "nvme 0000:02:00.0:   device [144d:a808] error status/mask="
     "00000001/0000e000", "aer.c aer_print_error '  device [%04x:%04x] error status/mask="
     "%08x/%08x'"),
    ("hardware_error_detail", "pcieport 0000:00:1c.0:   Error of this Agent(00e0) is reported "
     "first", "drivers/pci/pcie/aerdrv_errprint.c aer_print_error to 4.x '  Error of this "
     "Agent(%04x) is reported first'"),
    ("machine_check", "mce: CMCI storm detected: switching to poll mode",
     "arch/x86/kernel/cpu/mce/intel.c cmci_storm_detect (pr_notice, pr_fmt 'mce: ')"),
    ("memory_error_corrected", "RAS: Soft-offlining pfn: 0x17c08ac",
     "drivers/ras/cec.c cec_add_elem 'Soft-offlining pfn: 0x%llx' (pr_fmt 'RAS: ')"),
    ("btrfs_error", "btrfs: checksum error at logical %llu on dev %s, sector %llu, root %llu, "
     "inode %llu, offset %llu, length %llu, links %u (path: %s)",
     "fs/btrfs/scrub.c scrub_print_warning 3.x ('btrfs: %s at logical ...')"),
    ("btrfs_error", "BTRFS: open_ctree failed", "fs/btrfs/super.c btrfs_mount 3.14-4.x"),
    ("hardware_error_detail", "nvme 0000:02:00.0:    [ 0] RxErr                  (First)",
     "aer.c __aer_print_error '   [%2d] %-22s%s'"),
    # PCIe AER: the device's own report, every severity; recovery and containment
    ("pcie_aer_error", "nvme 0000:02:00.0: PCIe Bus Error: severity=Corrected, type=Physical "
     "Layer, (Receiver ID)", "drivers/pci/pcie/aer.c aer_print_error 4.19-6.7"),
    ("pcie_aer_error", "pcieport 0000:00:1c.0: PCIe Bus Error: severity=Uncorrected "
     "(Non-Fatal), type=Transaction Layer, id=0400(Requester ID)",
     "drivers/pci/pcie/aerdrv_errprint.c aer_print_error to 4.18"),
    ("pcie_aer_fatal", "mlx5_core 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
     "type=Transaction Layer, (Requester ID)", "aer.c aer_print_error 4.19-6.7"),
    ("pcie_aer_fatal", "pcieport 0000:00:03.0: AER: Device recovery failed",
     "drivers/pci/pcie/err.c pcie_do_recovery (pci_info, 'AER: ' dev_fmt)"),
    ("pcie_aer_fatal", "pcieport 0000:00:1b.0: DPC: containment event, status:0x1f01 "
     "source:0x0000", "drivers/pci/pcie/dpc.c dpc_process_error ('DPC: ' dev_fmt)"),
]

NOT_MATCHED = [
    ("ena 0000:00:05.0 eth0: Device reset completed, status: -5, Driver info: x",
     {"ena_reset_failed"}, "a failed reset is not a completed one"),
    ("ena 0000:00:05.0 eth0: Link is up", set(), "a healthy line"),
    ("traps: python3[4242] general protection fault ip:7f sp:7ffd error:0 in libc.so.6",
     set(), "a process's own fault is not a kernel one"),
    ("python3[4242]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:3b:00): 79, x",
     set(), "a process named like a driver line cannot fire its pattern"),
    ("[2/2] qid: 3, napi CPU: 7", set(), "the second half of a two-line report"),
    ("pcieport 0000:00:1c.0: AER: enabled with IRQ 122", set(), "AER at boot"),
    ("pcieport 0000:03:04.0: AER: Device recovery successful", set(),
     "a non-fatal error's recovery: its report line already fired"),
    ("BTRFS info (device sda2): disk space caching is enabled", set(), "btrfs at mount"),
    ("BTRFS warning (device sda2): failed to load free space cache for block group 4194304, "
     "rebuilding it now", set(), "btrfs rebuilds a cache (no data involved)"),
    ("EDAC MC0: Giving out device to module skx_edac controller Skylake Socket#0 IMC#0: DEV "
     "0000:3a:0a.0 (INTERRUPT)", set(), "EDAC at boot"),
    ("mce: CPU0: Thermal monitoring enabled (TM1)", set(), "mce at boot"),
    ("CMCI storm subsided: switching to interrupt mode", set(), "a CMCI storm's end"),
]


def _source() -> KmsgSource:
    return KmsgSource(Host(Path("/nonexistent")))


def _ids(cases: Sequence[tuple[str, ...]]) -> list[str]:
    return [f"{c[0]}:{c[-1][:40]}" for c in cases]


@pytest.mark.parametrize(("pattern", "printer", "fmt", "origin"), ENA_CASES,
                         ids=_ids(ENA_CASES))
def test_each_ena_format_string_matches_its_pattern(
        pattern: str, printer: str, fmt: str, origin: str) -> None:
    line = PREFIX[printer] + fill(fmt)
    assert _source().matches(line) == [pattern], (line, origin)


@pytest.mark.parametrize(("patterns", "fmt", "origin"), KERNEL_CASES,
                         ids=_ids(KERNEL_CASES))
def test_each_kernel_format_string_matches_its_patterns(
        patterns: str, fmt: str, origin: str) -> None:
    line = fill(fmt)
    assert sorted(_source().matches(line)) == sorted(patterns.split()), (line, origin)


@pytest.mark.parametrize(("line", "only", "why"), NOT_MATCHED, ids=[c[2] for c in NOT_MATCHED])
def test_lines_that_must_not_match(line: str, only: set[str], why: str) -> None:
    assert set(_source().matches(line)) == only, why


def test_every_shipped_pattern_has_a_case() -> None:
    covered = {c[0] for c in ENA_CASES} | {p for c in KERNEL_CASES for p in c[0].split()}
    # a line alone never confirms the runtime's task: tests/system/test_kernel_spoofing.py
    # checks it on the live host, by the service the PID runs in
    assert covered | {"hung_task_runtime"} == set(SHIPPED)


# -- the shipped rules fire on the lines -----------------------------------------------

# the rule each pattern is meant to fire (rules/nic.toml, rules/kernel.toml)
RULE_FOR = {
    "ena_tx_paused": "nic-tx-stall", "ena_tx_missing_completion": "nic-tx-stall",
    "ena_tx_lost_completions": "nic-tx-stall", "ena_poll_starvation": "nic-poll-starvation",
    "ena_keep_alive_timeout": "nic-device-unhealthy",
    "ena_admin_queue_timeout": "nic-device-unhealthy",
    "ena_admin_queue_error": "nic-device-unhealthy", "ena_msix_issue": "nic-device-unhealthy",
    "ena_unhealthy_reset_request": "nic-device-unhealthy", "ena_reset_triggered": "nic-reset",
    "ena_reset_failed": "nic-reset-failed", "nic_tx_timeout": "nic-reset",
    "ena_init_failed": "nic-reset-failed", "nic_hang_reset": "nic-reset",
    # the evidence that a reset happened (and, for once, that the device came back)
    "ena_reset_completed": "nic-reset-completed",
}


def _firing_after(tmp_path: Path, line: str) -> list[str]:
    """The shipped rules' firing set after the kernel prints ``line``: the real kmsg
    source reads a recording (facility kern, as the driver's line has), ticks before and
    after it."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    log = root / "dev" / "kmsg"
    log.write_text("6,1,1000,-;an earlier line\n")
    src = KmsgSource(Host(root), KmsgSource.Config(replay=True))
    collector = Collector(Host(root), [src])
    engine = Engine(load_rules([REPO / "rules"]))
    try:
        engine.evaluate(collector.collect(0.0))
        with log.open("a") as f:
            f.write(f"3,2,2000,-;{line}\n")
        engine.evaluate(collector.collect(30.0))
        return engine.firing()
    finally:
        src.close()


@pytest.mark.parametrize(("pattern", "printer", "fmt", "origin"), ENA_CASES,
                         ids=_ids(ENA_CASES))
def test_a_shipped_rule_fires_on_each_ena_line(
        tmp_path: Path, pattern: str, printer: str, fmt: str, origin: str) -> None:
    firing = _firing_after(tmp_path, PREFIX[printer] + fill(fmt))
    want = RULE_FOR[pattern]
    assert firing == ([want] if want else []), origin


# the rule each kernel pattern fires (rules/kernel.toml)
KERNEL_RULE_FOR = {
    "oom_kill": "kernel-oom-kill", "oom_kill_memcg": "kernel-oom-kill",
    "hung_task": "kernel-task-hung", "hung_task_runtime": "kernel-deadlock",
    "kernel_oops": "kernel-oops", "null_deref": "kernel-oops",
    "general_protection_fault": "kernel-oops", "soft_lockup": "kernel-cpu-lockup",
    "hard_lockup": "kernel-cpu-lockup", "rcu_stall": "kernel-cpu-lockup",
    "kernel_panic": "kernel-panic-logged", "unregister_netdevice": "netdevice-refcount-leak",
    "ext4_error": "filesystem-errors", "xfs_corruption": "filesystem-errors",
    "ext4_warning": "filesystem-warnings", "xfs_shutdown": "filesystem-shut-down",
    "fs_readonly": "filesystem-read-only", "io_error": "block-io-errors",
    "memory_error_corrected": "memory-errors-corrected",
    "memory_error_uncorrected": "memory-errors-uncorrected",
    "cper_corrected": "hardware-errors-corrected",
    "cper_recoverable": "hardware-errors-corrected", "cper_fatal": "hardware-error-fatal",
    "kernel_bad_access": "kernel-oops", "nvme_controller_reset": "block-io-errors",
    "machine_check": "hardware-errors-corrected", "pcie_aer_error": "hardware-errors-corrected",
    "pcie_aer_fatal": "hardware-error-fatal", "cpu_thermal_throttling": "cpu-thermal-throttling",
    "conntrack_table_full": "conntrack-table-full", "pids_fork_rejected": "pids-limit-reached",
    "nfs_server_not_responding": "nfs-server-not-responding",
    "nvidia_init_failed": "gpu-needs-reset",
    "nvidia_xid": "",  # the rules read gpu.xid, by the code's action: see XID_RULE
    "nvswitch_sxid_fatal": "gpu-nvswitch-fatal",
    "nvswitch_sxid_nonfatal": "gpu-nvswitch-errors",
    "nvswitch_sxid_detail": "gpu-nvswitch-errors",
    "btrfs_error": "filesystem-errors", "btrfs_error_corrected": "filesystem-warnings",
    "btrfs_dev_stats_at_mount": "filesystem-warnings",
    "memory_failure": "memory-errors-uncorrected",
    "hardware_error_detail": "hardware-errors-corrected",
}
# the rule the Xid's action (kernel_patterns.XID_ACTIONS) fires, through gpu.xid
XID_RULE = {"reset_gpu": "gpu-needs-reset", "reboot": "gpu-needs-reset",
            "nvlink": "gpu-needs-reset", "drain_p2p": "gpu-needs-reset",
            "restart_app": "gpu-application-errors", "unknown": "gpu-xid-unknown"}


@pytest.mark.parametrize(("patterns", "fmt", "origin"), KERNEL_CASES,
                         ids=_ids(KERNEL_CASES))
def test_a_shipped_rule_fires_on_each_kernel_line(
        tmp_path: Path, patterns: str, fmt: str, origin: str) -> None:
    line = fill(fmt)
    want = {KERNEL_RULE_FOR[p] for p in patterns.split()} - {""}
    if (xid := xid_of(line)) is not None and xid[2] in XID_RULE:
        want.add(XID_RULE[xid[2]])
    assert sorted(_firing_after(tmp_path, line)) == sorted(want), origin


def test_every_pattern_has_its_rule() -> None:
    assert set(RULE_FOR) | set(KERNEL_RULE_FOR) == set(SHIPPED)


def test_the_shipped_rules_tables_are_true() -> None:
    """Every row of docs/shipped-rules.md's ENA and kernel-problem tables is what the
    catalogue and the rule maps above say, and every node-problem-detector kernel problem
    is there (its reasons from config/kernel-monitor.json and readonly-monitor.json)."""
    from guardian.sources.kernel_patterns import ENA, KERNEL
    readme = (REPO / "docs" / "shipped-rules.md").read_text()
    for name, p in ENA.items():
        rule = RULE_FOR[name]
        assert (f"| `{name}` | {p.meaning} | "
                f"`{rule}` | {p.tested} |"
                ) in readme, name
    for name, p in KERNEL.items():
        rule = KERNEL_RULE_FOR[name]
        rules = f"`{rule}`" if rule else "by code (`gpu.xid`): `gpu-needs-reset`, " \
                                         "`gpu-application-errors`, `gpu-xid-unknown`"
        assert p.tested, name  # every kind says which kernels its test data is from
        assert (f"| {p.meaning} | {p.npd_reason or '—'} | `{name}` | {rules} | "
                f"{p.tested} |") in readme, name
    npd = {"OOMKilling", "TaskHung", "UnregisterNetDevice", "KernelOops", "Ext4Error",
           "Ext4Warning", "IOError", "XfsHasShutdown", "MemoryReadError",
           "CperHardwareErrorCorrected", "CperHardwareErrorRecoverable",
           "CperHardwareErrorFatal", "DockerHung", "FilesystemIsReadOnly"}
    assert npd == {p.npd_reason for p in KERNEL.values() if p.npd_reason}
    rules_text = "".join(f.read_text() for f in (REPO / "rules").glob("*.toml")
                         if not f.name.endswith(".test.toml"))  # a rule file, not its tests
    for name in SHIPPED:  # each pattern is read by a shipped rule
        assert f'pattern="{name}"' in rules_text or name == "nvidia_xid", name


# -- lines real machines printed ---------------------------------------------------------

# Collected from public bug reports, issues, forums and mailing lists (each entry names
# its origin and, where the report says, the kernel): the problem lines each kind's
# patterns are for, and benign lines of the same subsystems (boot noise, recoveries,
# virtual CD-ROM and floppy errors), which must match nothing.
REAL_LINES = json.loads((REPO / "tests" / "data" / "kernel_log_real.json").read_text())
# Lines the kernel logs for ordinary processes, carrying their own names and file names
# (tests/system/test_kernel_spoofing.py tries them with crafted names on this kernel).
USER_LINES = json.loads((REPO / "tests" / "data" / "kernel_usertext_real.json").read_text())


@pytest.mark.parametrize("case", REAL_LINES, ids=[f"{c['kind']}:{c['line'][:50]}"
                                                  for c in REAL_LINES])
def test_lines_real_machines_printed(case: dict[str, Any]) -> None:
    assert sorted(_source().matches(case["line"])) == case["patterns"], case["origin"]


def test_the_real_lines_cover_the_kinds() -> None:
    """Every kind the rules claim has real lines, not only lines built from formats."""
    seen = {p for c in REAL_LINES for p in c["patterns"]}
    missing = set(SHIPPED) - seen - {"hung_task_runtime", "ena_admin_queue_timeout",
                                     "ena_admin_queue_error", "ena_msix_issue",
                                     "ena_unhealthy_reset_request", "ena_reset_failed",
                                     "ena_init_failed", "unregister_netdevice",
                                     "ext4_warning", "memory_error_corrected",
                                     "memory_error_uncorrected", "cper_corrected",
                                     "cper_fatal", "kernel_panic",
                                     # format strings only: no public report of a
                                     # machine's fatal SXid line was found yet
                                     "nvswitch_sxid_fatal"}
    assert missing == set()
    assert sum(1 for c in REAL_LINES if not c["patterns"]) >= 40  # benign lines


@pytest.mark.parametrize("case", USER_LINES, ids=[c["line"][:50] for c in USER_LINES])
def test_a_processs_own_text_is_masked_in_real_lines(case: dict[str, Any]) -> None:
    assert MASK in mask(case["line"]), case["origin"]
    # only the kernel's own reports about the process (a kill, a hang) match
    assert set(_source().matches(case["line"])) <= {"oom_kill", "oom_kill_memcg",
                                                     "hung_task", "soft_lockup"}


def _family(kind: str) -> str:
    """The kind a real line belongs to, benign or not ("ena: <wording>" lines are all ENA)."""
    kind = kind.removesuffix(" (benign)")
    return "ena" if kind.startswith("ena") else kind


def coverage(lines: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Per kind: (problem lines, those a shipped rule catches, benign lines that match a
    pattern). A line is caught when a pattern a shipped rule reads (or gpu.xid, for Xid
    lines) matches it, as the live source would count it."""
    rules_text = "".join(f.read_text() for f in (REPO / "rules").glob("*.toml")
                         if not f.name.endswith(".test.toml"))
    read = {n for n in SHIPPED if f'pattern="{n}"' in rules_text} | {"nvidia_xid"}
    source, out = _source(), dict[str, tuple[int, int, int]]()
    for case in lines:
        found = set(source.matches(case["line"]))
        problems, caught, benign = out.get(_family(case["kind"]), (0, 0, 0))
        if case["patterns"]:
            out[_family(case["kind"])] = (problems + 1, caught + bool(found & read), benign)
        else:
            out[_family(case["kind"])] = (problems, caught, benign + bool(found))
    return out


def test_every_kind_is_caught_in_95_percent_of_its_real_lines_and_no_benign_line_fires() -> None:
    """Issue 44: the shipped rules catch at least 95% of the real lines of every kind they
    claim, and no benign line of the same subsystems matches. The message is the table."""
    figures = coverage(REAL_LINES)
    table = "\n".join(f"{k:40} {p:4} lines {c:4} caught {100 * c / p:5.1f}%  benign firing {b}"
                      if p else f"{k:40}    0 lines (benign only)        benign firing {b}"
                      for k, (p, c, b) in sorted(figures.items()))
    assert all(c >= 0.95 * p and b == 0 for p, c, b in figures.values()), table
    assert sum(p for p, _c, _b in figures.values()) >= 300, table
