"""The kernel-log patterns guardian ships: the ENA driver's reset path on every driver
generation, and the kernel problems node-problem-detector reports (plus lockups, RCU
stalls, panics and NVIDIA Xid errors).

Each pattern is anchored at the start of the message as the kernel or driver prints it,
so a process cannot fire one through its own name (see guardian.core.regexsafety), and each
names where its wording comes from. The tests build a line from every format string
quoted here and check it matches (tests/unit/sources/test_kernel_patterns.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from guardian.core.xid import ACTION_NAMES as XID_ACTION_NAME_LIST
from guardian.core.xid import action_of as xid_action_of
from guardian.core.xid import catalog as xid_catalog


@dataclass(frozen=True)
class KernelPattern:
    """One shipped pattern: its expression, what a match means, and where the wording
    comes from."""

    regex: str
    meaning: str
    origin: str
    npd_reason: str = ""  # node-problem-detector's reason for the same problem, if any
    # counted only when the task the line names (by the PID the kernel printed) is a
    # root process of one of these system services: its name is its own to choose
    task_units: tuple[str, ...] = ()
    tested: str = ""  # the kernels and drivers this pattern's test data comes from


# How the ENA driver's lines begin (drivers/base/core.c and net/core/dev.c):
#   dev_err():          "ena <pci address>: "
#   netdev_err()/netif_err(): "ena <pci address> <ifname>[ (<registration state>)]: "
#                       (an unnamed device prints "(unnamed net_device)")
#   pr_err() in ena_com (pr_fmt KBUILD_MODNAME ": "): "ena: "
# Interface names never hold ':', '/' or white space (net/core/dev.c dev_valid_name).
_PCI = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_PCI_ANY = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_IFNAME = r"(?:[^\s:/]+|\(unnamed net_device\))(?: \([a-z ]+\))?"
ENA_PREFIX = rf"^ena(?: {_PCI}(?: {_IFNAME})?)?: "
# Reports quote the Tx-completion lines from the interface name on ("ens5: The number of
# lost tx completions ...", amzn-drivers#163); their wording is the ENA driver's alone, so
# those patterns take a bare interface name too.

# a block device other than a virtual CD-ROM (sr0) or floppy (fd0): every cloud VM has
# them, empty, and the kernel reports reading them at boot as I/O errors
_DISK = r"(?!(?:sr|fd)\d)\S+"
# the driver (or, unbound, the bus) a PCI device's lines begin with: dev_printk's "%s %s: "
# (pcieport, nvme, xhci_hcd, ath10k_pci, mlx5_core, pci, ...)
_DEVICE = r"[a-z0-9_-]{1,32}"

_OOT = "amzn-drivers kernel/linux/ena/ena_netdev.c"
_OOT_COM = "amzn-drivers kernel/linux/common/ena_com/ena_com.c"
_INTREE = "drivers/net/ethernet/amazon/ena/ena_netdev.c"

# the services whose hung tasks mean the node cannot run containers
RUNTIME_UNITS = ("docker.service", "containerd.service", "crio.service",
                 "cri-docker.service", "kubelet.service")

ENA: dict[str, KernelPattern] = {
    "ena_tx_paused": KernelPattern(
        ENA_PREFIX + r"(?:TX q \d+ is paused for too long|Transmit time out$"
                     r"|TX timeout on invalid queue \d+"
                     r"|timeout was called, but no offending queue was found)",
        "the kernel's Tx watchdog found an ENA queue stopped (ndo_tx_timeout)",
        f"{_OOT} ena_tx_timeout: 'Transmit time out' (1.1.2-2.7.1; in-tree before 6.9), "
        "'TX q %d is paused for too long (threshold %u)...' (2.2.12+; in-tree 6.9+), netdev_warn "
        "'timeout was called, but no offending queue was found' (2.7.2-2.17.0, kernels "
        "before 5.6)"),
    "ena_poll_starvation": KernelPattern(
        ENA_PREFIX + r"napi handler hasn't been called for a long time but is scheduled",
        "the queue's NAPI poll was scheduled but never ran: the CPU starved softirqs "
        "(reset reason SUSPECTED_POLL_STARVATION)",
        f"{_OOT} ena_tx_timeout (2.2.12+); {_INTREE} 6.9+"),
    "ena_tx_missing_completion": KernelPattern(
        rf"^{_IFNAME}: (?:Found a Tx that wasn't completed on time|TX hasn't completed, qid)|"
        + ENA_PREFIX + r"(?:Found a Tx that wasn't completed on time|TX hasn't completed, qid"
                     r"|\[1/2\] \d+ new missed TX completions)",
        "Tx completions are overdue on a queue (the early warning before a reset)",
        f"{_OOT} check_missing_comp_in_tx_queue: \"Found a Tx that wasn't completed on "
        "time, qid %d, index %d.\" (1.1.2-2.7.1; in-tree before 6.9), \"TX hasn't completed, "
        "qid %d, index %d. ...\" (2.7.2-2.16.1; in-tree 6.9+), '[1/2] %d new missed TX "
        "completions, qid: %d, ...' (2.17.0)"),
    "ena_tx_lost_completions": KernelPattern(
        rf"^{_IFNAME}: The number of lost tx completions? is above the threshold|"
        + ENA_PREFIX + r"(?:The number of lost tx completions? is above the threshold"
                     r"|(?:\[1/2\] )?Lost TX completions are above (?:the )?threshold)",
        "missed Tx completions passed the driver's threshold: it resets the device",
        f"{_OOT}: 'The number of lost tx completion(s) is above the threshold (%d > %d). "
        "Reset the device' (1.1.2-2.7.1; in-tree before 6.9), 'Lost TX completions are above "
        "the threshold (%d > %d). ...' (2.2.12-2.16.1; in-tree 6.9+), '[1/2] Lost TX "
        "completions are above threshold (%d > %d), ...' (2.17.0)"),
    "ena_keep_alive_timeout": KernelPattern(
        ENA_PREFIX + r"Keep alive watchdog timeout",
        "the device stopped sending keep-alive events: the driver resets it",
        f"{_OOT} check_for_missing_keep_alive: 'Keep alive watchdog timeout.' (1.1.2-2.11.1;"
        " in-tree), 'Keep alive watchdog timeout, %u msecs since last keep alive.' (2.12+)"),
    "ena_admin_queue_timeout": KernelPattern(
        ENA_PREFIX + r"(?:ENA admin queue is not in running state!"
                     r"|The ena device (?:didn't|doesn't) send (?:a|any) completion for the "
                     r"admin cmd|Wait for completion \(polling\) timeout"
                     r"|Reg read(?:32)? timeout occurred|[Rr]eading reg failed for timeout"
                     r"|FW isn't responsive, skipping reset routine)",
        "the device's admin queue stopped answering",
        f"{_OOT} check_for_admin_com_state; {_OOT_COM} ena_com_wait_and_process_admin_cq_"
        "{polling,interrupts}, ena_com_reg_bar_read32 (1.1.2-2.17.0)"),
    "ena_admin_queue_error": KernelPattern(
        ENA_PREFIX + r"(?:[Aa]dmin command (?:failed\[\d+\]|\d+ failed \(\d+\))"
                     r"|Command was aborted|Failed to (?:submit|process) command"
                     r"|comp_ctx is NULL\. Changing the admin queue running state"
                     r"|Completion context is (?:NULL|occupied))",
        "an admin command failed or was aborted",
        f"{_OOT_COM}: 'admin command failed[%u]' (1.x), 'Admin command failed[%u]' "
        "(2.2.11-2.16.1), 'Admin command %u failed (%u)' (2.17.0), 'Command was aborted', "
        "'Failed to submit command [%d]', 'Failed to process command...'"),
    "ena_msix_issue": KernelPattern(
        ENA_PREFIX + r"(?:Potential MSIX issue on (?:Rx|Tx) side Queue = \d+"
                     r"|The ena device (?:sent a|have) completion but the driver didn't "
                     r"receive (?:a|any) MSI-X interrupt)",
        "interrupts are not arriving (MSI-X): the driver resets the device",
        f"{_OOT} check_for_rx_interrupt_queue / check_missing_comp_in_tx_queue: 'Potential "
        "MSIX issue on Rx|Tx side Queue = %d...' (1.5.0+); {_OOT_COM}: 'The ena device have|"
        "sent a completion but the driver didn't receive any|a MSI-X interrupt (cmd %d)...'"),
    "ena_unhealthy_reset_request": KernelPattern(
        ENA_PREFIX + r"The device has detected an unhealthy state, reset is requested",
        "the device itself asked for a reset",
        f"{_OOT} ena_notification (2.2.12+): 'The device has detected an unhealthy state, "
        "reset is requested'"),
    "ena_reset_triggered": KernelPattern(
        ENA_PREFIX + r"(?:Trigger reset is on|Resetting the device$)",
        "the driver is resetting the device",
        f"{_OOT} ena_timer_service / ena_fw_reset_device: 'Trigger reset is on' (1.1.2-"
        "2.17.0; in-tree); check_missing_comp_in_tx_queue: 'Resetting the device' after the "
        "lost-completions line (2.7.2-2.17.0; in-tree 6.9+)"),
    "ena_reset_completed": KernelPattern(
        ENA_PREFIX + r"Device reset completed(?: successfully|, status: 0,)",
        "the device came back from a reset",
        f"{_OOT} ena_restore_device / ena_fw_reset_device: 'Device reset completed "
        "successfully' (1.x; in-tree), '..., Driver info: %s' (2.0.2-2.13.0), 'Device reset "
        "completed, status: %d, Driver info: %s' with status 0 (2.13.1+)"),
    "ena_reset_failed": KernelPattern(
        ENA_PREFIX + r"(?:Reset attempt failed\. Can not reset the device"
                     r"|Device reset completed, status: -?[1-9]\d*,"
                     r"|Can not reset device$|Device reset failed$|Restore attempt failed)",
        "a reset failed: the device did not come back (a worse problem than a reset)",
        f"{_OOT} ena_restore_device: 'Reset attempt failed. Can not reset the device' "
        "(dev_err 1.5.0-2.16.1; in-tree; netif_err in 2.17.0's callers), 'Restore attempt "
        "failed.' (2.17.0); ena_fw_reset_device: 'Device reset completed, status: %d, "
        "Driver info: %s' with a non-zero status (2.13.1+, counted in reset_fail); "
        "ena_device_init / ena_destroy_device: 'Can not reset device' (dev_err 1.5.0-"
        "2.17.0), 'Device reset failed' (dev_err to 2.2.10, netif_err 2.2.11+)"),
    "ena_init_failed": KernelPattern(
        ENA_PREFIX + r"(?:ena device init failed|Can not initialize device)$",
        "the driver could not initialize the device (at probe or after a reset)",
        f"{_OOT} ena_probe / ena_device_init: 'ena device init failed' (dev_err 1.5.0-"
        "2.2.10), 'Can not initialize device' (dev_err 1.5.0-2.17.0)"),
    "nic_tx_timeout": KernelPattern(
        r"^(?:.{1,80}: )?NETDEV WATCHDOG: (?:\S+ \(\S+\)|CPU: \d+): transmit queue \d+ "
        r"timed out",
        "the kernel's Tx watchdog fired on a NIC queue (any driver)",
        "net/sched/sch_generic.c dev_watchdog: 'NETDEV WATCHDOG: %s (%s): transmit queue %u "
        "timed out' (WARN_ONCE; ' %u ms' appended in 6.3), netdev_crit 'NETDEV WATCHDOG: "
        "CPU: %d: transmit queue %u timed out %u ms' (6.7+)"),
    "nic_hang_reset": KernelPattern(
        rf"^(?:e1000e?|igb|igbvf|igc|ixgbe|ixgbevf|i40e|iavf|ice|mlx5_core|bnxt_en) {_PCI}"
        r"(?::? \S+)?: (?:Detected (?:Hardware|Tx) Unit Hang|Reset adapter"
        r"|VSI_seid \d+, Hung TX queue \d+"
        r"|tx hang \d+ detected on queue \d+, resetting adapter"
        r"|initiating reset due to tx timeout|TX driver issue detected, PF reset issued"
        r"|TX timeout detected, starting reset task|TX timeout on queue: \d+"
        r"|mlx5e_tx_timeout|cmd_work_handler:\d+:\(pid \d+\): cmd\[\d+\]: [^)]{0,64}timeout"
        r"|poll_health:\d+:\(pid \d+\): Fatal error|health compromised)",
        "another NIC driver found a hung queue or reset its adapter (e1000e, igb, ixgbe, "
        "i40e, ice, mlx5, bnxt_en)",
        "drivers/net/ethernet/intel/e1000e/netdev.c e1000_print_hw_hang 'Detected Hardware "
        "Unit Hang:', e1000e_reset_task 'Reset adapter unexpectedly'; igb_main.c / "
        "ixgbe_main.c 'Detected Tx Unit Hang', ixgbe 'tx hang %d detected on queue %d, "
        "resetting adapter', 'initiating reset due to tx timeout', 'Reset adapter'; "
        "i40e_main.c 'TX driver issue detected, PF reset issued'; mellanox/mlx5 en_main.c "
        "'TX timeout on queue: %d, ...', cmd.c 'cmd[%d]: %s(0x%x) ... timeout', health.c "
        "'Fatal error %d detected', 'health compromised'; broadcom bnxt.c 'TX timeout "
        "detected, starting reset task!'"),
}

KERNEL: dict[str, KernelPattern] = {
    "oom_kill": KernelPattern(
        r"^(?:(?:Out of memory|Memory cgroup out of memory)"
        r"(?: \(oom_kill_allocating_task\))?: )?Kill(?:ed)? process \d+,? (?:UID \d+, )?\(",
        "the OOM killer killed a process (system or memcg; kernels before 5.1 print the "
        "victim's choice and its kill, two lines)",
        "mm/oom_kill.c: 'Out of memory: Kill process %d (%s) score %u or sacrifice child' "
        "and 'Killed process %d (%s) total-vm:%lukB, ...' (to 5.0), 'Killed process %d, UID "
        "%u, (%s) total-vm:...' (4.x distribution kernels), '%s: Killed process %d (%s) "
        "total-vm:...' with 'Out of memory' / 'Memory cgroup out of memory' (5.1+)",
        "OOMKilling"),
    "oom_kill_memcg": KernelPattern(
        r"^Memory cgroup out of memory: Kill(?:ed)? process \d+,? (?:UID \d+, )?\(",
        "the OOM killer killed a process because its memory cgroup hit its limit",
        "mm/oom_kill.c: 'Memory cgroup out of memory: Kill process %d (%s) score %u or "
        "sacrifice child' (to 5.0), 'Memory cgroup out of memory: Killed process ...' (5.1+)",
        "OOMKilling"),
    "hung_task": KernelPattern(
        r"^INFO: task .{1,64}:\d+ blocked for more than \d+ seconds\.",
        "a task has been in uninterruptible sleep for longer than hung_task_timeout_secs",
        "kernel/hung_task.c check_hung_task: 'INFO: task %s:%d blocked for more than %ld "
        "seconds.'", "TaskHung"),
    "hung_task_runtime": KernelPattern(
        r"^INFO: task .{1,64}:\d+ blocked for more than \d+ seconds\.",
        "a container runtime's task (docker, containerd, CRI-O, kubelet) is hung in the "
        "kernel (node-problem-detector's KernelDeadlock)",
        "kernel/hung_task.c check_hung_task, the PID's cgroup one of the runtimes' services "
        "(node-problem-detector matches the name 'docker', which any process can take)",
        "DockerHung", task_units=RUNTIME_UNITS),
    "kernel_oops": KernelPattern(
        r"^(?:Oops: )?(?:Oops|[a-z][a-z ]{1,40}(?:, [^:]{1,80})?): [0-9a-f]{4} \[#\d+\]"
        r"|^Internal error: [^:]{1,40}: [0-9a-f]+ \[#\d+\]|^Oops(?:: [^\[]{1,80})? \[#\d+\]"
        r"|^kernel BUG at \S{1,128}:\d+!",
        "the kernel oopsed (any die(): page fault, divide error, invalid opcode, GPF, BUG())",
        "arch/x86/kernel/dumpstack.c __die_header: '%s: %04lx [#%d]%s%s...' (to 6.8), "
        "'Oops: %s: %04lx [#%d]...' (6.10+); arch/arm64/kernel/traps.c and arch/arm: "
        "'Internal error: %s: %08x|%016lx [#%d]...'; arch/riscv, arch/powerpc die: '%s "
        "[#%d]' ('Oops [#1]', 'Oops: Kernel access of bad area, sig: 11 [#1]'); "
        "BUG(): 'kernel BUG at %s:%u!'", "KernelOops"),
    "kernel_bad_access": KernelPattern(
        r"^BUG: unable to handle (?:kernel paging request at|page fault for address:"
        r"|kernel paging request for address)"
        r"|^Unable to handle kernel (?:paging request|access to user memory|execute from "
        r"non-executable memory|read from unreadable memory|write to read-only memory) at "
        r"virtual address",
        "the kernel accessed an address it may not (a paging request or page fault oops)",
        "arch/x86/mm/fault.c show_fault_oops: 'BUG: unable to handle kernel paging request "
        "at %p' (to 4.19), 'BUG: unable to handle page fault for address: %px' (4.20+); "
        "arch/arm64/mm/fault.c die_kernel_fault and arch/arm/mm/fault.c __do_kernel_fault: "
        "'Unable to handle kernel %s at virtual address %016lx'", "KernelOops"),
    "null_deref": KernelPattern(
        r"^BUG: (?:unable to handle kernel NULL pointer dereference at"
        r"|kernel NULL pointer dereference, address: )"
        r"|^Unable to handle kernel NULL pointer dereference at virtual address",
        "the kernel dereferenced a NULL pointer",
        "arch/x86/mm/fault.c: 'BUG: unable to handle kernel NULL pointer dereference at %p' "
        "(to 4.19), 'BUG: kernel NULL pointer dereference, address: %px' (4.20+); arm64 and "
        "arm: 'Unable to handle kernel NULL pointer dereference at virtual address %016lx'",
        "KernelOops"),
    "general_protection_fault": KernelPattern(
        r"^(?:Oops: )?general protection fault(?:, [^:]{1,80})?: [0-9a-f]{4} \[#\d+\]",
        "the kernel took a general protection fault",
        "arch/x86/kernel/traps.c do_general_protection / die_addr: 'general protection "
        "fault' (to 5.3), 'general protection fault, probably for non-canonical address "
        "0x%lx' (5.4+), prefixed 'Oops: ' by __die_header (6.9+)"),
    "unregister_netdevice": KernelPattern(
        r"^unregister_netdevice: waiting for \S+ to become free\. Usage count = -?\d+",
        "a network device cannot be freed: something leaks a reference to it",
        "net/core/dev.c netdev_wait_allrefs(_any): 'unregister_netdevice: waiting for %s to "
        "become free. Usage count = %d'", "UnregisterNetDevice"),
    "ext4_error": KernelPattern(
        r"^EXT4-fs error \(device [^)]{1,64}\)"
        r"|^EXT4-fs \([^)]{1,64}\): (?:I/O error while writing superblock"
        r"|error count since last fsck: \d+)"
        r"|^Aborting journal on device \S{1,64}\.|^JBD2: (?:Error -?\d+ detected when "
        r"updating journal superblock|Detected IO errors while flushing file data)",
        "ext4 found an error on a filesystem (or its journal was aborted)",
        "fs/ext4/super.c __ext4_error / __ext4_error_inode / __ext4_error_file: 'EXT4-fs "
        "error (device %s): %s:%d: ...'; ext4_commit_super: 'I/O error while writing "
        "superblock'; print_daily_error_info: 'error count since last fsck: %u' (daily "
        "while a filesystem has errors); fs/jbd2/journal.c __jbd2_journal_abort_hard: "
        "'Aborting journal on device %s.', jbd2_write_superblock: 'JBD2: Error %d detected "
        "when updating journal superblock for %s.'", "Ext4Error"),
    "ext4_warning": KernelPattern(
        r"^EXT4-fs warning \(device [^)]{1,64}\)",
        "ext4 warned about a filesystem",
        "fs/ext4/super.c __ext4_warning: 'EXT4-fs warning (device %s): %s:%d: %pV'",
        "Ext4Warning"),
    "xfs_shutdown": KernelPattern(
        r"^XFS \([^)]{1,64}\): (?:.{0,200}[Ss]hutting down filesystem"
        r"|Filesystem has been shut down|xfs_do_force_shutdown\(0x[0-9a-f]+\) called from"
        r"|xfs_log_force: error -?\d+ returned)",
        "XFS shut a filesystem down: it is unusable until repaired",
        "fs/xfs/xfs_fsops.c xfs_do_force_shutdown: '... Shutting down filesystem' "
        "(every wording), 'Filesystem has been shut down due to log error (0x%x).' (6.x), "
        "'xfs_do_force_shutdown(0x%x) called from line %d of file %s. Return address = "
        "%pS' (to 5.x); fs/xfs/xfs_log.c: 'xfs_log_force: error %d returned.'",
        "XfsHasShutdown"),
    "xfs_corruption": KernelPattern(
        r"^XFS \([^)]{1,64}\): (?:Metadata corruption detected|Corruption detected"
        r"|Internal error|metadata I/O error|log I/O error -?\d+)|^XFS: Internal error",
        "XFS found metadata corruption or could not read its metadata",
        "fs/xfs/xfs_error.c xfs_corruption_error / xfs_verifier_error / xfs_error_report: "
        "'Metadata corruption detected at %pS, ...', 'Internal error %s at line %d of file "
        "%s.' (XFS_WANT_CORRUPTED_GOTO/RETURN); xfs_buf_item.c / xfs_buf.c: 'metadata I/O "
        "error in \"%pS\" at daddr 0x%llx len %d error %d' (4.x+), 'metadata I/O error: "
        "block 0x%llx (\"%s\") error %d numblks %d' (3.x)"),
    "io_error": KernelPattern(
        rf"^Buffer I/O error on dev(?:ice)? {_DISK}"
        rf"|^(?:[a-z_]{{1,32}}: )?[A-Za-z/ ]{{1,40}} error, dev {_DISK}, sector \d+"
        r"|^(?:[^:]{1,16}: )?attempt to access beyond end of device"
        r"|^nvme\d+(?:c\d+)?n\d+: I/O Cmd\(0x[0-9a-f]+\) @ LBA \d+, \d+ blocks, I/O Error"
        r"|^sd \d+:\d+:\d+:\d+: \[[^\]]{1,32}\] (?:(?:tag#\d+ )?(?:FAILED"
        r"|UNKNOWN\(0x[0-9a-f]+\)) Result: hostbyte=|Unhandled (?:error|sense) code)",
        "a block device returned an I/O error (virtual CD-ROM and floppy drives left out: "
        "cloud VMs read them at boot)",
        "fs/buffer.c: 'Buffer I/O error on dev %pg, logical block %llu, ...' ('on device "
        "%s' before 4.10); block/blk-core.c: 'blk_update_request: %s error, dev %s, sector "
        "%llu' (4.x-5.15), '%s error, dev %s, sector %llu op 0x%x:(%s) ...' (5.16+); "
        "block/blk-core.c bio_check_eod: 'attempt to access beyond end of device' ('%s: ...' "
        "naming the process, 5.x+); "
        "drivers/nvme/host/core.c nvme_log_error: '%s: %s(0x%x) @ LBA %llu, %u blocks, %s "
        "(sct 0x%x / sc 0x%x)' (6.0+); drivers/scsi/sd.c sd_done via scsi_print_result: "
        "'[%s] tag#%d FAILED Result: hostbyte=%s driverbyte=%s' (4.x+; 'UNKNOWN(0x%x)' for an "
        "unnamed disposition; 3.x: 'Unhandled error code', then 'Result: ...')", "IOError"),
    "nvme_controller_reset": KernelPattern(
        r"^nvme nvme\d+: (?:I/O (?:tag )?\d+ (?:\([0-9a-f]+\) )?"
        r"(?:opcode 0x[0-9a-f]+ \([^)]{0,40}\) )?QID \d+ timeout, "
        r"(?:aborting|reset controller|disable controller)"
        r"|controller is down; will reset|Abort status: 0x[0-9a-f]+"
        r"|Removing after probe failure|Device not ready; aborting)",
        "an NVMe controller stopped answering: commands timed out, it was reset or removed",
        "drivers/nvme/host/pci.c nvme_timeout: 'I/O %d QID %d timeout, aborting' / ', "
        "reset controller' / ', disable controller' (', completion polled' is a recovered "
        "timeout, left out; 'I/O tag %d "
        "(%04x) opcode %#x (%s) QID %d timeout, ...' 6.x), nvme_should_reset: 'controller "
        "is down; will reset: CSTS=0x%x, PCI_STATUS=0x%x', abort_endio: 'Abort status: "
        "0x%x', nvme_remove_dead_ctrl: 'Removing after probe failure status: %d'; core.c "
        "nvme_wait_ready: 'Device not ready; aborting reset|initialisation'"),
    "fs_readonly": KernelPattern(
        r"^[A-Z0-9]{2,8}-fs \([^)]{1,64}\): (?:error: )?[Rr]emounting filesystem read-only"
        r"|^BTRFS [a-z]{1,8} \(device [^)]{1,64}\): forced readonly",
        "a filesystem was remounted read-only after an error",
        "fs/ext4/super.c ext4_handle_error: 'EXT4-fs (%s): Remounting filesystem "
        "read-only'; fs/ext2 and ext3: 'error: remounting filesystem read-only'; "
        "fs/btrfs/messages.c: 'forced readonly'", "FilesystemIsReadOnly"),
    "btrfs_error": KernelPattern(
        r"^BTRFS (?:error|critical|alert|emergency)(?: \(device [^)]{1,64}\))?: "
        r"(?!fixed up error at )"
        r"|^BTRFS: (?:error \(device [^)]{1,64}\) in |Transaction aborted \(error -?\d+\))"
        r"|^(?:BTRFS|btrfs): bdev \S{1,128} errs: wr \d+"
        r"|^BTRFS [a-z]{4,9} \(device [^)]{1,64}\): (?:"
        r"csum failed |(?:\S{1,64} )?checksum verify failed on |checksum(?:/header)? error at"
        r" |i/o error at |direct IO failed |Skipping commit of aborted transaction"
        r"|lost page write due to IO error)"
        r"|^btrfs (?:csum failed ino \d+|bad tree block start \d+)"
        r"|^btrfs: (?:checksum(?:/header)? error|i/o error|unable to fixup \(regular\) error) "
        r"at logical \d+|^(?:BTRFS|btrfs): open_ctree failed"
        r"|^parent transid verify failed on \d+ wanted \d+ found \d+",
        "btrfs found an error: a device's I/O or checksum failed, metadata is corrupt, or a "
        "transaction was aborted (the filesystem goes read-only)",
        "fs/btrfs/messages.c btrfs_printk: 'BTRFS %s (device %s%s): %pV' (level error, "
        "critical, alert, emergency; ': state %s' in the device 5.x+; 'BTRFS %s: %pV' "
        "without one), __btrfs_handle_fs_error: 'BTRFS: error (device %s%s) in %s:%d: "
        "errno=%d %s'; transaction.h btrfs_abort_transaction: 'BTRFS: Transaction aborted "
        "(error %d)'; volumes.c btrfs_dev_stat_inc_and_print / _print_on_error: 'bdev %s "
        "errs: wr %u, rd %u, flush %u, corrupt %u, gen %u' (btrfs_err_rl: level error, as an "
        "error happens; 3.x's 'btrfs: bdev ...' / 'BTRFS: bdev ...' say no level, at error "
        "and at mount alike; the at-mount line with a level is btrfs_dev_stats_at_mount); "
        "inode.c btrfs_print_data_csum_error: 'csum "
        "failed root %lld ino %llu off %llu csum ... expected csum ... mirror %d' (warning; "
        "'btrfs csum failed ino %llu off %llu csum %u private %llu' 3.x); disk-io.c: '%s "
        "checksum verify failed on %llu wanted %X found %X level %d' (4.x), 'checksum verify "
        "failed on logical %llu mirror %u wanted ... found ... level %d' (5.x+), 'parent "
        "transid verify failed on %llu wanted %llu found %llu' (no prefix in 3.x), 'btrfs "
        "bad tree block start %llu %llu' (3.x); scrub.c scrub_print_warning: '%s at logical "
        "%llu on dev %s, physical %llu, root %llu, inode %llu, offset %llu, ...' ('i/o "
        "error', 'checksum error', 'checksum/header error'); direct-io: 'direct IO failed "
        "ino %llu rw %d,%u sector %#Lx len %u err no %d'; transaction.c: 'Skipping commit of "
        "aborted transaction.'; disk-io.c: 'lost page write due to IO error on %s'; 3.x: "
        "scrub.c 'btrfs: %s at logical %llu on dev %s, sector %llu, ...', super.c 'btrfs: "
        "open_ctree failed' ('BTRFS: open_ctree failed' 3.14-4.x)"),
    "btrfs_dev_stats_at_mount": KernelPattern(
        r"^BTRFS info \(device [^)]{1,64}\): bdev \S{1,128} errs: wr \d+",
        "at mount, a btrfs device's error counters are not all zero: it had I/O or checksum "
        "errors in the past (the counters persist until 'btrfs device stats -z')",
        "fs/btrfs/volumes.c btrfs_init_dev_stats -> btrfs_dev_stat_print_on_load: 'bdev %s "
        "errs: wr %u, rd %u, flush %u, corrupt %u, gen %u' with btrfs_info (btrfs_info_in_rcu "
        "to 6.14), printed only when a counter is non-zero ('all values == 0, suppress "
        "message'); the same counters as an error happens are btrfs_err_rl's 'BTRFS error "
        "(device ...)' (btrfs_error)"),
    "btrfs_error_corrected": KernelPattern(
        r"^BTRFS [a-z]{4,9} \(device [^)]{1,64}\): (?:read error corrected: "
        r"|fixed up error at logical \d+)",
        "btrfs read bad data and repaired it from a good copy (a device is returning errors)",
        "fs/btrfs/extent_io.c / bio.c repair_io_failure: 'read error corrected: ino %llu off "
        "%llu (dev %s sector %llu)' (btrfs_info_rl_in_rcu); scrub.c: 'fixed up error at "
        "logical %llu on dev %s' (btrfs_err_rl_in_rcu)"),
    "memory_error_corrected": KernelPattern(
        r"^EDAC MC\d+: (?:\d+ CE |CE (?:page 0x|row \d|- no information available))"
        r"|^RAS: Soft-offlining pfn: 0x[0-9a-f]+",
        "the memory controller corrected a memory error (or corrected errors repeated on one "
        "page until the kernel offlined it)",
        "drivers/edac/edac_mc.c edac_ce_error: 'EDAC MC%d: %d CE %s%son %s (...)' (3.5+; "
        "ghes_edac's 'CE Single-bit ECC on ...'); edac_mc_handle_ce to 3.4: 'CE page 0x%lx, "
        "offset 0x%lx, grain %d, syndrome 0x%lx, row %d, channel %d, label \"%s\": %s', "
        "edac_mc_handle_ce_no_info: 'CE - no information available: %s'; drivers/ras/cec.c "
        "cec_add_elem: 'Soft-offlining pfn: 0x%llx' (pr_fmt 'RAS: ')",
        "MemoryReadError"),
    "memory_error_uncorrected": KernelPattern(
        r"^EDAC MC\d+: (?:\d+ UE |UE (?:page 0x|row \d|- no information available))",
        "the memory controller found an uncorrectable memory error",
        "drivers/edac/edac_mc.c edac_ue_error: 'EDAC MC%d: %d UE %s%son %s (...)' (3.5+); "
        "edac_mc_handle_ue to 3.4: 'UE page 0x%lx, offset 0x%lx, grain %d, row %d, labels "
        "\"%s\": %s', 'UE - no information available: %s'"),
    "memory_failure": KernelPattern(
        r"^Memory failure: 0x[0-9a-f]+: |^MCE 0x[0-9a-f]+: (?:[A-Za-z -]{1,40} page recovery: "
        r"|recovery action for )"
        r"|^(?:mce: )?(?:Uncorrected hardware memory error in user-access at [0-9a-f]+"
        r"|Memory error not recovered)",
        "the kernel took a page with an uncorrectable memory error out of use (hwpoison), or "
        "could not recover from one",
        "mm/memory-failure.c action_result: 'Memory failure: %#lx: recovery action for %s: "
        "%s' (pr_fmt 'Memory failure: ' 4.x+; 'MCE %#lx: %s page recovery: %s' in 2.6.32-3.x, "
        "'MCE %#lx: recovery action for %s: %s' 3.x-4.x), kill_proc 'Memory failure: %#lx: "
        "Sending SIGBUS to %s:%d due to hardware memory corruption', 'already hardware "
        "poisoned', 'unhandlable page'; arch/x86/kernel/cpu/mce/core.c kill_me_maybe: "
        "'Uncorrected hardware memory error in user-access at %llx', kill_me_now / "
        "mce_panic: 'Memory error not recovered' (pr_fmt 'mce: ')"),
    "cper_corrected": KernelPattern(
        r"^(?:\{\d+\})?\[Hardware Error\]: event severity: corrected$",
        "firmware reported a corrected hardware error (CPER)",
        "drivers/firmware/efi/cper.c cper_print_hdr: '%sevent severity: %s' with prefix "
        "'{%u}[Hardware Error]: '", "CperHardwareErrorCorrected"),
    "cper_recoverable": KernelPattern(
        r"^(?:\{\d+\})?\[Hardware Error\]: event severity: recoverable$",
        "firmware reported a recoverable hardware error (CPER)",
        "drivers/firmware/efi/cper.c cper_print_hdr", "CperHardwareErrorRecoverable"),
    "cper_fatal": KernelPattern(
        r"^(?:\{\d+\})?\[Hardware Error\]: event severity: fatal$",
        "firmware reported a fatal hardware error (CPER)",
        "drivers/firmware/efi/cper.c cper_print_hdr", "CperHardwareErrorFatal"),
    "soft_lockup": KernelPattern(
        r"^(?:(?:NMI )?watchdog: )?BUG: soft lockup - CPU#\d+ stuck for \d+s!",
        "a CPU ran kernel code without scheduling for longer than the soft-lockup threshold",
        "kernel/watchdog.c watchdog_timer_fn: 'BUG: soft lockup - CPU#%d stuck for %us! "
        "[%s:%d]' (pr_fmt 'NMI watchdog: ' 4.0-4.12 when kernel/watchdog.c carried it, "
        "'watchdog: ' since 4.13)"),
    "hard_lockup": KernelPattern(
        r"^(?:NMI watchdog: |watchdog: )?(?:CPU\d+: )?(?:Watchdog detected hard LOCKUP on "
        r"cpu \d+"
        r"|Watchdog CPU:\d+ Hard LOCKUP|CPU \d+ (?:self-)?detected hard LOCKUP)",
        "a CPU stopped taking interrupts",
        "kernel/watchdog_hld.c watchdog_overflow_callback (pr_fmt 'NMI watchdog: '), "
        "kernel/watchdog.c watchdog_hardlockup_check (6.6+): 'Watchdog detected hard LOCKUP "
        "on cpu %d'; 'Watchdog CPU:%d Hard LOCKUP' (the hpwdt / buddy wording of vendor "
        "kernels); arch/powerpc/kernel/watchdog.c: 'CPU %d self-detected hard LOCKUP @ %pS',"
        " 'CPU %d detected hard LOCKUP on other CPUs %*pbl'"),
    "rcu_stall": KernelPattern(
        r"^(?:rcu: )?INFO: [a-z_]{2,24} (?:self-detected stall on CPU"
        r"|detected (?:expedited )?stalls? on (?:CPUs/tasks|tasks|CPU))",
        "an RCU grace period is stalled (any flavour: sched, preempt, bh, expedited, tasks)",
        "kernel/rcu/tree_stall.h print_other_cpu_stall / print_cpu_stall: 'INFO: %s detected "
        "stalls on CPUs/tasks:', 'INFO: %s self-detected stall on CPU'; tree_exp.h: 'INFO: "
        "%s detected expedited stalls on CPUs/tasks: {'; tasks.h: 'INFO: %s detected stalls "
        "on tasks:' (pr_fmt 'rcu: ' since 4.20); 3.x: 'INFO: %s detected stall on CPU %d' "
        "and 'INFO: rcu_sched_state detected stall on CPU %d (t=%lu jiffies)'"),
    "kernel_panic": KernelPattern(
        r"^Kernel panic - not syncing: ",
        "the kernel panicked (seen only when the log outlives the panic, e.g. replayed)",
        "kernel/panic.c panic: 'Kernel panic - not syncing: %s'"),
    "machine_check": KernelPattern(
        r"^(?:mce: )?\[Hardware Error\]: (?:Machine check events logged"
        r"|CPU \d+: Machine Check(?: Exception)?: |Machine check: "
        r"|CPU:\d+ \([0-9a-f]+:[0-9a-f]+:[0-9a-f]+\) MC\d+_STATUS\["
        r"|(?:Corrected|Deferred) error, no action required\.|Uncorrected, software )"
        r"|^Machine check events logged|^(?:mce: )?CMCI storm detected: switching to poll mode",
        "the CPU reported a machine check (a hardware error the kernel logged), or so many "
        "corrected ones that it stopped taking their interrupts (a CMCI storm)",
        "arch/x86/kernel/cpu/mce/core.c mce_notify_irq: '[Hardware Error]: Machine check "
        "events logged' (pr_fmt 'mce: ' 4.x+; bare 'Machine check events logged' in 3.x), "
        "print_mce: 'CPU %d: Machine Check%s: %Lx Bank %d: %016Lx', mce_panic: 'Machine "
        "check: %s'; drivers/edac/mce_amd.c decode_smca_error / amd_decode_mce (HW_ERR "
        "'[Hardware Error]: '): 'CPU:%d (%x:%x:%x) MC%d_STATUS[...]', 'Corrected error, no "
        "action required.', 'Deferred error, no action required.', 'Uncorrected, software "
        "containable error.' / 'restartable'; arch/x86/kernel/cpu/mce/intel.c "
        "cmci_storm_detect: 'CMCI storm detected: switching to poll mode' (pr_fmt 'mce: ' "
        "5.x+; its end, 'CMCI storm subsided: switching to interrupt mode', matches nothing)"),
    "pcie_aer_error": KernelPattern(
        rf"^(?:pcieport|aer) {_PCI_ANY}(?::pcie\d+)?: (?:AER: )?(?:Multiple )?(?:Corrected"
        r"|Correctable|Uncorrect(?:ed|able) \(Non-Fatal\)) error (?:message )?received"
        rf"|^{_DEVICE} {_PCI}(?::pcie\d+)?: (?:AER: )?PCIe Bus Error: severity="
        r"(?:Corrected|Correctable|Uncorrect(?:ed|able) \(Non-Fatal\)),",
        "a PCIe link reported a corrected or non-fatal error (AER): the root port's line, "
        "or the reporting device's own",
        "drivers/pci/pcie/aer.c aer_print_port_info: '%s%s error message received from "
        "%04x:%02x:%02x.%d' (6.x), 'AER: %s%s error received: %04x:%02x:%02x.%d' (4.19+), "
        "'AER: %s%s error received: id=%04x' (to 4.18, aerdrv_errprint.c); aer_print_error: "
        "'PCIe Bus Error: severity=%s, type=%s, (%s)' ('..., id=%04x(%s)' to 4.18) printed "
        "by the device's own driver name; severities 'Corrected', 'Uncorrected (Non-Fatal)' "
        "('Correctable' / 'Uncorrectable' 6.8+)"),
    "pcie_aer_fatal": KernelPattern(
        rf"^(?:pcieport|aer) {_PCI_ANY}(?::pcie\d+)?: (?:AER: )?(?:Multiple )?"
        r"Uncorrect(?:ed|able) \(Fatal\) error (?:message )?received"
        rf"|^{_DEVICE} {_PCI}(?::pcie\d+)?: (?:AER: )?(?:PCIe Bus Error: severity="
        r"Uncorrect(?:ed|able) \(Fatal\),|[Dd]evice recovery failed"
        r"|DPC: containment event)",
        "a PCIe link reported a fatal uncorrected error (AER), its recovery failed, or the "
        "port contained it by taking the link down (DPC): the device may be lost",
        "drivers/pci/pcie/aer.c aer_print_port_info / aer_print_error, severity "
        "'Uncorrected (Fatal)' ('Uncorrectable (Fatal)' 6.8+); drivers/pci/pcie/err.c "
        "pcie_do_recovery: 'AER: Device recovery failed' ('device recovery failed' 5.x+); "
        "drivers/pci/pcie/dpc.c dpc_process_error: 'DPC: containment event, status:%#06x "
        "source:%#06x'"),
    "hardware_error_detail": KernelPattern(
        r"^(?:mce: )?\[Hardware Error\]: (?!Machine check|CPU \d+: Machine Check"
        r"|CPU:\d+ \(|(?:Corrected|Deferred) error, no action|Uncorrected, software "
        r"|event severity: (?:corrected|recoverable|fatal)$)"
        r"|^\{\d+\}\[Hardware Error\]: (?!event severity: (?:corrected|recoverable|fatal)$)"
        rf"|^{_DEVICE} {_PCI}(?::pcie\d+)?: (?:AER: )? {{0,4}}(?:device \[[0-9a-f]{{4}}:"
        r"[0-9a-f]{4}\] error status/mask=|\[ ?\d{1,2}\] [A-Za-z]|TLP Header: "
        r"|aer_(?:status|layer|uncor_severity|cor_status|uncor_status)(?:: |=)"
        r"|Error of this Agent(?:\([0-9a-f]{4}\))? is reported first|can't find device of ID"
        r"|can't recover \(no error_detected callback\)"
        r"|(?:Downstream|Root) Port link has been reset)"
        r"|^EDAC [a-z0-9_]{1,16} MC\d+: (?:HANDLING MCE MEMORY ERROR"
        r"|CPU \d+: Machine Check (?:Event|Exception): |(?:TSC|ADDR|MISC) (?:0x)?[0-9a-f]+"
        r"(?: |$)|PROCESSOR \d+:[0-9a-f]+ TIME \d+ )",
        "a line of a hardware error report whose severity another of its lines gives (a "
        "machine check's or firmware's (CPER) detail, a PCIe AER report's status bits, an "
        "EDAC driver decoding a memory machine check)",
        "arch/x86/kernel/cpu/mce/core.c print_mce (HW_ERR '[Hardware Error]: '): 'RIP%s "
        "%02x:<%016Lx>', 'TSC %llx ', 'ADDR %llx ', 'MISC %llx ', 'PROCESSOR %u:%x TIME %llu "
        "SOCKET %u APIC %x microcode %x', 'Run the above through 'mcelog --ascii''; "
        "drivers/edac/mce_amd.c: 'Error Addr: 0x%016llx', 'IPID: ...'; drivers/firmware/efi/"
        "cper.c / drivers/acpi/apei/ghes.c ('{%u}[Hardware Error]: '): 'Hardware error from "
        "APEI Generic Hardware Error Source: %d', ' Error %d, type: %s', '  section_type: "
        "%s', 'It has been corrected by h/w and requires no further action'; drivers/pci/"
        "pcie/aer.c aer_print_error / pci_print_aer: '  device [%04x:%04x] error status/"
        "mask=%08x/%08x', '   [%2d] %-22s%s', '  TLP Header: %08x %08x %08x %08x', "
        "'aer_status: 0x%08x, aer_mask: 0x%08x', 'aer_layer=%s, aer_agent=%s', "
        "'aer_uncor_severity: 0x%08x', '  Error of this Agent is reported first' ('Agent(%04x)' "
        "to 4.x), "
        "find_source_device: 'can't find device of ID%04x'; drivers/pci/pcie/err.c "
        "report_error_detected: 'can't recover (no error_detected callback)', "
        "aer_root_reset: '%s Port link has been reset (%d)'; drivers/edac/"
        "sb_edac.c sbridge_mce_check_error, skx_common.c skx_mce_check_error, i10nm, "
        "pnd2_edac.c: 'HANDLING MCE MEMORY ERROR', 'CPU %d: Machine Check %s: %Lx Bank %d: "
        "%016Lx', 'TSC %llx ', 'ADDR %llx ', 'MISC %llx ', 'PROCESSOR %u:%x TIME %llu SOCKET "
        "%u APIC %x'"),
    "cpu_thermal_throttling": KernelPattern(
        r"^(?:mce: )?CPU\d+: (?:Core|Package) temperature (?:is )?above threshold, cpu "
        r"clock (?:is )?throttled",
        "a CPU's clock was throttled because it ran too hot",
        "arch/x86/kernel/cpu/mce/therm_throt.c therm_throt_process: 'CPU%d: %s temperature "
        "above threshold, cpu clock throttled (total events = %lu)' (to 5.4, 'mce: ' on 5.x), "
        "'%s temperature is above threshold, cpu clock is throttled' (5.5+); the benign "
        "'temperature/speed normal' is its end"),
    "conntrack_table_full": KernelPattern(
        r"^nf_conntrack: (?:nf_conntrack: )?table full, dropping packet",
        "the connection-tracking table is full: new connections are dropped",
        "net/netfilter/nf_conntrack_core.c __nf_conntrack_alloc: 'nf_conntrack: table "
        "full, dropping packet' (net_warn_ratelimited; printed twice-prefixed 'nf_conntrack: "
        "nf_conntrack: ' from 4.x, as pr_fmt and the message both name it)"),
    "pids_fork_rejected": KernelPattern(
        r"^cgroup: fork rejected by pids controller in ",
        "a fork was refused: a cgroup hit its pids.max",
        "kernel/cgroup/pids.c pids_can_fork / pids_event: 'cgroup: fork rejected by pids "
        "controller in %s' (4.x+, once per cgroup)"),
    "nfs_server_not_responding": KernelPattern(
        r"^(?:nfs|lockd): server \S{1,255} not responding, (?:still trying|timed out)",
        "an NFS server stopped answering: tasks using the mount hang or fail",
        "fs/nfs/client.c / sunrpc clnt.c call_timeout via nfs_timeout: 'nfs: server %s not "
        "responding, still trying' / ', timed out' (3.10+); the benign 'nfs: server %s OK' "
        "is its end"),
    "nvidia_init_failed": KernelPattern(
        r"^NVRM: (?:GPU [0-9a-fA-F:.]{7,16}: )?(?:RmInitAdapter failed!"
        r"|rm_init_adapter failed|The NVIDIA probe routine failed"
        r"|None of the NVIDIA devices were initialized)"
        rf"|^nvidia {_PCI_ANY}: probe (?:with driver nvidia failed|failed)"
        rf"|^nvidia: probe of {_PCI_ANY} failed with error"
        r"|^NVRM: The NVIDIA GPU [0-9a-fA-F:.]{7,16}[\s\S]{0,200}fallen off the bus"
        r"|^NVRM: fallen off the bus and is not responding",
        "the NVIDIA driver could not initialize a GPU (it is unusable until fixed)",
        "open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osinit.c: 'NVRM: GPU "
        "%04x:%02x:%02x.%x: RmInitAdapter failed! (0x%x:0x%x:%d)', kernel-open/nvidia/nv.c: "
        "'NVRM: rm_init_adapter failed, device minor number %d' ('for device bearing minor "
        "number %d' in the closed driver), nv-pci.c: 'NVRM: The NVIDIA probe routine failed "
        "for %d device(s).', 'NVRM: None of the NVIDIA devices were initialized.'; "
        "drivers/base/dd.c: '%s: probe of %s failed with error %d' (to 6.9), 'probe with "
        "driver %s failed with error %d' (6.10+); nv.c: 'NVRM: The NVIDIA GPU %04x:%02x:%02x.%x "
        "(PCI ID: ...) installed in this system has fallen off the bus and is not responding "
        "to commands.' (one record, or one line each)"),
    "nvidia_xid": KernelPattern(
        r"^NVRM: Xid \((?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}[^)]{0,40}\): "
        r"\d+, ",
        "the NVIDIA driver reported an Xid error on a GPU",
        "open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c: 'NVRM: Xid "
        "(PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s'"),
    "nvswitch_sxid_fatal": KernelPattern(
        rf"^nvidia-nvswitch\d+: SXid \(PCI:{_PCI_ANY}\): \d+, Fatal, ",
        "an NVSwitch reported a fatal error (SXid): the GPUs behind it need NVIDIA's NVLink "
        "workflow (their reset, or the node's)",
        "open-gpu-kernel-modules src/common/nvswitch/kernel/inc/common_nvswitch.h "
        "NVSWITCH_PRINT_SXID: 'nvidia-%s: SXid (PCI:' NVLINK_PCI_DEV_FMT '): %05d, ' _fmt "
        "(the device's name is nvswitch<N>); error_nvswitch.h / intr reporting: 'Fatal, "
        "Link %02d %s%s'"),
    "nvswitch_sxid_detail": KernelPattern(
        rf"^nvidia-nvswitch\d+: SXid \(PCI:{_PCI_ANY}\): \d+, (?:Severity \d+ |Data \{{)",
        "a line of an NVSwitch SXid report (its severity and data words; its first line "
        "says Fatal or Non-fatal)",
        "open-gpu-kernel-modules src/common/nvswitch: the lines NVSWITCH_PRINT_SXID's "
        "'nvidia-%s: SXid (PCI:...): %05d, ' begins after a report's first line: 'Severity "
        "%d Engine instance %02d Sub-engine instance %02d', 'Data {0x%08x, ...}' (as 570.x "
        "printed them: canonical/tdx#414; NVSentinel's SXid parser reads them as the report's "
        "continuation)"),
    "nvswitch_sxid_nonfatal": KernelPattern(
        rf"^nvidia-nvswitch\d+: SXid \(PCI:{_PCI_ANY}\): \d+, Non-fatal, ",
        "an NVSwitch reported a non-fatal error (SXid) on a link",
        "open-gpu-kernel-modules src/common/nvswitch/kernel/inc/error_nvswitch.h "
        "NVSWITCH_REPORT_NONFATAL_LINK: 'Non-fatal, Link %02d ' _fmt, after "
        "NVSWITCH_PRINT_SXID's 'nvidia-%s: SXid (PCI:...): %05d, '"),
}

SHIPPED: dict[str, KernelPattern] = {**ENA, **KERNEL}

# An Xid line's GPU (its PCI bus address, as the driver prints it) and code.
XID_LINE = re.compile(r"^NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                      r"[^)]{0,40}\): (\d+), ")
# What NVIDIA's Xid catalog answers each code with (guardian/data/xid.toml, read by
# guardian.core.xid): restart the application, reset the GPU, reboot, the NVLink workflow,
# drain peer-to-peer traffic, or nothing (informational). Xid 154 and 45 are not in it:
# their action is on their line (guardian.core.xid.action_of).
XID_ACTIONS: dict[int, str] = xid_catalog()
XID_ACTION_NAMES = XID_ACTION_NAME_LIST


def xid_of(line: str) -> tuple[str, int, str] | None:
    """(GPU's PCI address, Xid code, NVIDIA's immediate action) of an Xid line: the
    catalog's for its code, or the one the rest of its line names (Xid 154's new recovery
    action, Xid 45's cause)."""
    found = XID_LINE.match(line)
    if found is None:
        return None
    code = int(found[2])
    return found[1].lower(), code, xid_action_of(code, line[found.end():])
_TESTED = {
    'ena_tx_paused': 'ENA 1.1.2-2.17.0 format strings; real: 2.11.0g (Pinterest)',
    'ena_poll_starvation': 'ENA 2.2.12-2.17.0, in-tree 6.9+; real: 2.11.0g',
    'ena_tx_missing_completion': 'ENA 1.1.2-2.17.0; real: 1.5.0K, 2.x (amzn-drivers #134, #220)',
    'ena_tx_lost_completions': 'ENA 1.1.2-2.17.0; real: 1.5.0K, 2.1.0K (amzn-drivers #134, #147)',
    'ena_keep_alive_timeout': 'ENA 1.1.2-2.17.0; real: 1.5.0K (amzn-drivers #134, #285)',
    'ena_admin_queue_timeout': 'ENA 1.1.2-2.17.0 (ena_com)',
    'ena_admin_queue_error': 'ENA 1.1.2-2.17.0 (ena_com)',
    'ena_msix_issue': 'ENA 1.5.0-2.17.0',
    'ena_unhealthy_reset_request': 'ENA 2.2.12-2.17.0',
    'ena_reset_triggered': 'ENA 1.1.2-2.17.0; real: 1.5.0K, 2.1.0K on 5.5',
    'ena_reset_completed': 'ENA 1.5.0-2.17.0; real: 1.5.0K, 2.4.0g, 2.11.0g',
    'ena_reset_failed': 'ENA 1.5.0-2.17.0 (dev_err and netif_err)',
    'ena_init_failed': 'ENA 1.5.0-2.17.0 (dev_err)',
    'nic_tx_timeout': '3.10-6.12 (sch_generic.c, every wording); real: ena 1.5.3, ixgbe, e1000e, '
                      'bnxt_en on 6.7+',
    'nic_hang_reset': 'e1000e, igb, ixgbe, i40e, mlx5, bnxt_en format strings; real lines from '
                      'their bug reports',
    'oom_kill': '2.6.32 (RHEL 6) to 6.x; real: 3.10 (RHEL 7), 4.x, 5.4, 6.x',
    'oom_kill_memcg': '3.10-6.x; real: 3.10.0-327 (RHEL 7), 5.x',
    'hung_task': '3.10-6.12; real: docker, dockerd, containerd-shim, kubelet hangs',
    'hung_task_runtime': 'live: a root process in system.slice/containerd.service on this host',
    'kernel_oops': 'x86 3.10-6.12 (Oops: prefix 6.10+), arm64 (8 and 16 hex digits), arm, riscv, '
                   'powerpc',
    'kernel_bad_access': 'x86 to 4.19 and 5.0+, arm64',
    'null_deref': 'x86 to 4.19 and 5.0+, arm64, arm',
    'general_protection_fault': 'x86 to 5.4, 5.5-6.9, 6.10+',
    'unregister_netdevice': '3.10-6.12; node-problem-detector sample',
    'ext4_error': '3.10-6.12 (ext4 and jbd2); real lines from 4.x and 5.x',
    'ext4_warning': '3.10-6.12',
    'xfs_shutdown': '3.10-6.12 (xfs_do_force_shutdown to 5.14, new wording 5.15+)',
    'xfs_corruption': '3.x-6.12 (metadata I/O error, both wordings)',
    'io_error': '3.10 (end_request) to 6.12 (no prefix 5.16+), NVMe 5.18+, SCSI 3.10-6.12; '
                'sr0/fd0 excluded (Azure, VMware, Debian lines)',
    'nvme_controller_reset': 'to 6.4 and 6.5+ timeout wordings; real lines on 6.8',
    'fs_readonly': 'ext2/ext3/ext4, btrfs 3.10-6.12',
    'memory_error_corrected': 'EDAC 2.6.x-3.4 and 3.5-6.12 wordings, ghes_edac; real: sb_edac '
                              '(4.x, 5.x), skx_edac, AMD (edac_mce_amd)',
    'memory_error_uncorrected': 'EDAC 2.6.x-3.4 and 3.5-6.12 wordings; real: skx_edac (EINJ)',
    'memory_failure': '2.6.32-3.x (MCE %#lx), 4.x+ (Memory failure:); real: 4.x, 5.x, 6.x',
    'btrfs_error': '3.x (btrfs:, unprefixed), 3.14-4.x, 5.x+ (: state in the device), every '
                   'level; real: 4.x-6.x bug reports',
    'btrfs_dev_stats_at_mount': 'btrfs_info wording to 6.x (3.x print no level: '
                                'btrfs_error); real: 4.15, 5.19',
    'btrfs_error_corrected': '4.x-6.x; real: 4.x, 6.x',
    'hardware_error_detail': 'mce 3.x-6.12, edac_mce_amd, CPER/GHES 4.x-6.12, AER 3.x-6.12, '
                             'sb_edac/skx_edac; real lines from their reports',
    'nvswitch_sxid_detail': 'open-gpu-kernel-modules 535-570; real: 570.195 (canonical/tdx#414)',
    'cper_corrected': '4.x-6.12 (GHES)',
    'cper_recoverable': '4.x-6.12 (GHES)',
    'cper_fatal': '4.x-6.12 (GHES)',
    'machine_check': '3.x-6.12 (mce: prefix 4.x+), edac_mce_amd (SMCA and older AMD)',
    'pcie_aer_error': '3.x-4.18 (id=), 4.19-6.7, 6.8+ (Correctable); the root port\'s and '
                      'the device\'s lines; real: 4.x-6.x',
    'pcie_aer_fatal': '4.19-6.7 and 6.8+ wordings, recovery failed, DPC containment',
    'cpu_thermal_throttling': 'to 5.4 and 5.5+ wordings',
    'conntrack_table_full': '3.x and 4.x+ (doubled prefix)',
    'pids_fork_rejected': '4.8-6.12',
    'nfs_server_not_responding': '3.10-6.12',
    'soft_lockup': '3.10 (none), 4.0-4.12 (NMI watchdog:), 4.13+ (watchdog:)',
    'hard_lockup': '3.x-6.4 (NMI watchdog:), 6.5+ (watchdog:), powerpc 4.13+',
    'rcu_stall': '2.6.3x/3.0 (rcu_sched_state), 3.x-4.18, 4.19+ (rcu:)',
    'kernel_panic': '3.10-6.12',
    'nvidia_init_failed': 'open-gpu-kernel-modules 515+, the closed 358.x driver, kernel probe '
                          'wording to 6.9 and 6.10+',
    'nvidia_xid': 'drivers 515-595 (with and without pid/name), MIG, older closed drivers, Xid '
                  '154 (565+); 19 real lines',
    'nvswitch_sxid_fatal': 'open-gpu-kernel-modules 535+ format strings (NVSWITCH_PRINT_SXID)',
    'nvswitch_sxid_nonfatal': 'open-gpu-kernel-modules 535+ format strings',
}
for _name, _tested in _TESTED.items():
    SHIPPED[_name] = dataclasses.replace(SHIPPED[_name], tested=_tested)
    (ENA if _name in ENA else KERNEL)[_name] = SHIPPED[_name]

DEFAULT_PATTERNS: dict[str, str] = {name: p.regex for name, p in SHIPPED.items()}
TASK_UNITS: dict[str, tuple[str, ...]] = {
    name: p.task_units for name, p in SHIPPED.items() if p.task_units}
