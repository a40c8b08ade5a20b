"""The kernel-log patterns guardian ships: the ENA driver's reset path on every driver
generation, and the kernel problems node-problem-detector reports (plus lockups, RCU
stalls, panics and NVIDIA Xid errors).

Each pattern is anchored at the start of the message as the kernel or driver prints it,
so a process cannot fire one through its own name (see guardian.regexsafety), and each
names where its wording comes from. The tests build a line from every format string
quoted here and check it matches (tests/test_kernel_patterns.py).
"""

from __future__ import annotations

from dataclasses import dataclass


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


# How the ENA driver's lines begin (drivers/base/core.c and net/core/dev.c):
#   dev_err():          "ena <pci address>: "
#   netdev_err()/netif_err(): "ena <pci address> <ifname>[ (<registration state>)]: "
#                       (an unnamed device prints "(unnamed net_device)")
#   pr_err() in ena_com (pr_fmt KBUILD_MODNAME ": "): "ena: "
# Interface names never hold ':', '/' or white space (net/core/dev.c dev_valid_name).
_PCI = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_IFNAME = r"(?:[^\s:/]+|\(unnamed net_device\))(?: \([a-z ]+\))?"
ENA_PREFIX = rf"^ena(?: {_PCI}(?: {_IFNAME})?)?: "

_OOT = "amzn-drivers kernel/linux/ena/ena_netdev.c"
_OOT_COM = "amzn-drivers kernel/linux/common/ena_com/ena_com.c"
_INTREE = "drivers/net/ethernet/amazon/ena/ena_netdev.c"

# the services whose hung tasks mean the node cannot run containers
RUNTIME_UNITS = ("docker.service", "containerd.service", "crio.service",
                 "cri-docker.service", "kubelet.service")

ENA: dict[str, KernelPattern] = {
    "ena_tx_paused": KernelPattern(
        ENA_PREFIX + r"(?:TX q \d+ is paused for too long|Transmit time out$"
                     r"|TX timeout on invalid queue \d+)",
        "the kernel's Tx watchdog found an ENA queue stopped (ndo_tx_timeout)",
        f"{_OOT} ena_tx_timeout: 'Transmit time out' (1.1.2-2.7.1; in-tree before 6.9), "
        "'TX q %d is paused for too long (threshold %u)...' (2.2.12+; in-tree 6.9+)"),
    "ena_poll_starvation": KernelPattern(
        ENA_PREFIX + r"napi handler hasn't been called for a long time but is scheduled",
        "the queue's NAPI poll was scheduled but never ran: the CPU starved softirqs "
        "(reset reason SUSPECTED_POLL_STARVATION)",
        f"{_OOT} ena_tx_timeout (2.2.12+); {_INTREE} 6.9+"),
    "ena_tx_missing_completion": KernelPattern(
        ENA_PREFIX + r"(?:Found a Tx that wasn't completed on time|TX hasn't completed, qid"
                     r"|\[1/2\] \d+ new missed TX completions)",
        "Tx completions are overdue on a queue (the early warning before a reset)",
        f"{_OOT} check_missing_comp_in_tx_queue: \"Found a Tx that wasn't completed on "
        "time, qid %d, index %d.\" (1.1.2-2.7.1; in-tree before 6.9), \"TX hasn't completed, "
        "qid %d, index %d. ...\" (2.7.2-2.16.1; in-tree 6.9+), '[1/2] %d new missed TX "
        "completions, qid: %d, ...' (2.17.0)"),
    "ena_tx_lost_completions": KernelPattern(
        ENA_PREFIX + r"(?:The number of lost tx completions? is above the threshold"
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
        ENA_PREFIX + r"Trigger reset is on",
        "the driver is resetting the device",
        f"{_OOT} ena_fw_reset_device: 'Trigger reset is on' (1.1.2-2.17.0; in-tree)"),
    "ena_reset_completed": KernelPattern(
        ENA_PREFIX + r"Device reset completed(?: successfully|, status: 0,)",
        "the device came back from a reset",
        f"{_OOT} ena_restore_device / ena_fw_reset_device: 'Device reset completed "
        "successfully' (1.x; in-tree), '..., Driver info: %s' (2.0.2-2.13.0), 'Device reset "
        "completed, status: %d, Driver info: %s' with status 0 (2.13.1+)"),
    "ena_reset_failed": KernelPattern(
        ENA_PREFIX + r"(?:Reset attempt failed\. Can not reset the device"
                     r"|Device reset completed, status: -?[1-9]\d*,)",
        "a reset failed: the device did not come back (a worse problem than a reset)",
        f"{_OOT} ena_restore_device: 'Reset attempt failed. Can not reset the device' "
        "(1.1.2-2.17.0; in-tree), ena_fw_reset_device: 'Device reset completed, status: %d, "
        "Driver info: %s' with a non-zero status (2.13.1+, counted in reset_fail)"),
    "nic_tx_timeout": KernelPattern(
        r"^(?:.{1,80}: )?NETDEV WATCHDOG: (?:\S+ \(\S+\)|CPU: \d+): transmit queue \d+ "
        r"timed out",
        "the kernel's Tx watchdog fired on a NIC queue (any driver)",
        "net/sched/sch_generic.c dev_watchdog: 'NETDEV WATCHDOG: %s (%s): transmit queue %u "
        "timed out' (WARN_ONCE; ' %u ms' appended in 6.3), netdev_crit 'NETDEV WATCHDOG: "
        "CPU: %d: transmit queue %u timed out %u ms' (6.7+)"),
}

KERNEL: dict[str, KernelPattern] = {
    "oom_kill": KernelPattern(
        r"^(?:(?:Out of memory|Memory cgroup out of memory)"
        r"(?: \(oom_kill_allocating_task\))?: )?Killed process \d+ \(",
        "the OOM killer killed a process (one line per kill, system or memcg)",
        "mm/oom_kill.c: 'Killed process %d (%s) total-vm:%lukB, ...' (to 5.0), '%s: Killed "
        "process %d (%s) total-vm:...' with 'Out of memory' / 'Memory cgroup out of memory' "
        "(5.1+)", "OOMKilling"),
    "oom_kill_memcg": KernelPattern(
        r"^Memory cgroup out of memory: Kill(?:ed)? process \d+ \(",
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
        r"|^Internal error: [^:]{1,40}: [0-9a-f]+ \[#\d+\]",
        "the kernel oopsed (any die(): page fault, divide error, invalid opcode, GPF)",
        "arch/x86/kernel/dumpstack.c __die_header: '%s: %04lx [#%d]%s%s...' (to 6.8), "
        "'Oops: %s: %04lx [#%d]...' (6.9+); arch/arm64/kernel/traps.c: 'Internal error: %s: "
        "%016lx [#%d]...'", "KernelOops"),
    "null_deref": KernelPattern(
        r"^BUG: (?:unable to handle kernel NULL pointer dereference at"
        r"|kernel NULL pointer dereference, address: )",
        "the kernel dereferenced a NULL pointer",
        "arch/x86/mm/fault.c: 'BUG: unable to handle kernel NULL pointer dereference at %p' "
        "(to 4.19), 'BUG: kernel NULL pointer dereference, address: %px' (4.20+)",
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
        r"^EXT4-fs error \(device [^)]{1,64}\)",
        "ext4 found an error on a filesystem",
        "fs/ext4/super.c __ext4_error / __ext4_error_inode / __ext4_error_file: 'EXT4-fs "
        "error (device %s): %s:%d: ...'", "Ext4Error"),
    "ext4_warning": KernelPattern(
        r"^EXT4-fs warning \(device [^)]{1,64}\)",
        "ext4 warned about a filesystem",
        "fs/ext4/super.c __ext4_warning: 'EXT4-fs warning (device %s): %s:%d: %pV'",
        "Ext4Warning"),
    "xfs_shutdown": KernelPattern(
        r"^XFS \([^)]{1,64}\): (?:.{0,200}[Ss]hutting down filesystem"
        r"|Filesystem has been shut down)",
        "XFS shut a filesystem down: it is unusable until repaired",
        "fs/xfs/xfs_fsops.c xfs_do_force_shutdown: '... Shutting down filesystem' "
        "(every wording), 'Filesystem has been shut down due to log error (0x%x).' (6.x)",
        "XfsHasShutdown"),
    "xfs_corruption": KernelPattern(
        r"^XFS \([^)]{1,64}\): (?:Metadata corruption detected|Corruption detected"
        r"|Internal error)",
        "XFS found metadata corruption",
        "fs/xfs/xfs_error.c xfs_corruption_error / xfs_verifier_error / xfs_error_report: "
        "'Metadata corruption detected at %pS, ...', 'Internal error %s at line %d of file "
        "%s.'"),
    "io_error": KernelPattern(
        r"^Buffer I/O error on dev(?:ice)? \S+"
        r"|^(?:[a-z_]{1,32}: )?[A-Za-z/ ]{1,40} error, dev \S+, sector \d+",
        "a block device returned an I/O error",
        "fs/buffer.c: 'Buffer I/O error on dev %pg, logical block %llu, ...' ('on device "
        "%s' before 4.10); block/blk-core.c: 'blk_update_request: %s error, dev %s, sector "
        "%llu' (4.x-5.15), '%s error, dev %s, sector %llu op 0x%x:(%s) ...' (5.16+)",
        "IOError"),
    "fs_readonly": KernelPattern(
        r"^[A-Z0-9]{2,8}-fs \([^)]{1,64}\): (?:error: )?[Rr]emounting filesystem read-only"
        r"|^BTRFS [a-z]{1,8} \(device [^)]{1,64}\): forced readonly",
        "a filesystem was remounted read-only after an error",
        "fs/ext4/super.c ext4_handle_error: 'EXT4-fs (%s): Remounting filesystem "
        "read-only'; fs/ext2 and ext3: 'error: remounting filesystem read-only'; "
        "fs/btrfs/messages.c: 'forced readonly'", "FilesystemIsReadOnly"),
    "memory_error_corrected": KernelPattern(
        r"^EDAC MC\d+: \d+ CE ",
        "the memory controller corrected a memory error",
        "drivers/edac/edac_mc.c edac_ce_error: 'EDAC MC%d: %d CE %s%son %s (...)'",
        "MemoryReadError"),
    "memory_error_uncorrected": KernelPattern(
        r"^EDAC MC\d+: \d+ UE ",
        "the memory controller found an uncorrectable memory error",
        "drivers/edac/edac_mc.c edac_ue_error: 'EDAC MC%d: %d UE %s%son %s (...)'"),
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
        r"^(?:watchdog: )?BUG: soft lockup - CPU#\d+ stuck for \d+s!",
        "a CPU ran kernel code without scheduling for longer than the soft-lockup threshold",
        "kernel/watchdog.c watchdog_timer_fn: 'BUG: soft lockup - CPU#%d stuck for %us! "
        "[%s:%d]' (pr_fmt 'watchdog: ' since 4.13)"),
    "hard_lockup": KernelPattern(
        r"^(?:NMI watchdog: |watchdog: )?Watchdog detected hard LOCKUP on cpu \d+",
        "a CPU stopped taking interrupts",
        "kernel/watchdog_hld.c watchdog_overflow_callback (pr_fmt 'NMI watchdog: '), "
        "kernel/watchdog.c watchdog_hardlockup_check (6.6+): 'Watchdog detected hard LOCKUP "
        "on cpu %d'"),
    "rcu_stall": KernelPattern(
        r"^(?:rcu: )?INFO: [a-z_]{2,24} (?:self-detected stall on CPU"
        r"|detected (?:expedited )?stalls? on (?:CPUs/tasks|tasks))",
        "an RCU grace period is stalled (any flavour: sched, preempt, bh, expedited, tasks)",
        "kernel/rcu/tree_stall.h print_other_cpu_stall / print_cpu_stall: 'INFO: %s detected "
        "stalls on CPUs/tasks:', 'INFO: %s self-detected stall on CPU'; tree_exp.h: 'INFO: "
        "%s detected expedited stalls on CPUs/tasks: {'; tasks.h: 'INFO: %s detected stalls "
        "on tasks:' (pr_fmt 'rcu: ' since 4.20)"),
    "kernel_panic": KernelPattern(
        r"^Kernel panic - not syncing: ",
        "the kernel panicked (seen only when the log outlives the panic, e.g. replayed)",
        "kernel/panic.c panic: 'Kernel panic - not syncing: %s'"),
    "nvidia_xid": KernelPattern(
        r"^NVRM: Xid \((?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}[^)]{0,40}\): "
        r"\d+, ",
        "the NVIDIA driver reported an Xid error on a GPU",
        "open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c: 'NVRM: Xid "
        "(PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s'"),
}

SHIPPED: dict[str, KernelPattern] = {**ENA, **KERNEL}
DEFAULT_PATTERNS: dict[str, str] = {name: p.regex for name, p in SHIPPED.items()}
TASK_UNITS: dict[str, tuple[str, ...]] = {
    name: p.task_units for name, p in SHIPPED.items() if p.task_units}
