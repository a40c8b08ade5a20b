"""Kernel-log lines that carry text an unprivileged process chooses, and where it sits.

The kernel logs some kernel-facility lines on behalf of ordinary processes, and they
embed what the process controls: its name (``task->comm``, up to 15 characters, set with
``prctl(PR_SET_NAME)`` or by running a file of that name) and file names or paths of its
own (the mapping ``print_vma_addr`` names). A segfault prints ``<comm>[<pid>]: segfault
at ... in <file>[...]``: the line *begins* with the process's text, so anchoring a pattern
at the start of the line does not stop a process from firing it.

Each :class:`UserTextTemplate` is one such message, as the kernel's format strings print
it (origins beside each); :func:`mask` blanks every user-chosen field before any pattern
sees the line, so no pattern can match inside one. The kernel's own text around the
fields stays, so a pattern may still count, say, segfaults, but :func:`spoofable` (what
``guardian check`` runs over every pattern) says so: any process can print those at will.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from guardian.core.regexsafety import example_match

COMM = r"[\s\S]{0,15}"  # TASK_COMM_LEN - 1; anything but NUL, newlines included
MASK = "\u2423"  # what a user-chosen field reads as once masked ("␣")
_HEX = r"(?:[0-9a-f]+|\(null\))"  # %p / %lx; kernels before 4.15 print NULL as "(null)"
_CPU = r"(?: likely on CPU \d+ \(core \d+, socket \d+\))?"  # x86, 6.2+
# print_vma_addr's " in %s[%lx+%lx]" (" in %s[%lx,%lx+%lx]", the offset first, 6.13+),
# then the CPU: the file name runs to the last such suffix, or to the end of a line cut
# short by a name too long for one record
_VMA = rf"(?: in (?P<file>[\s\S]*?)(?:\[(?:[0-9a-f]+,)?[0-9a-f]+\+[0-9a-f]+\]{_CPU})?)?"


@dataclass(frozen=True)
class UserTextTemplate:
    """One kernel message that embeds user-chosen text: its regex (the user fields are
    the named groups ``comm``, ``file``, ``path``, ``rest``), a line of it with ``{comm}``
    / ``{file}`` where those fields go, and where the wording comes from. ``reports`` is
    True for a real event the kernel reports about the process (an OOM kill, a hung
    task): a pattern may match its words. The rest any process prints at will."""

    name: str
    regex: str
    sample: str
    origin: str
    reports: bool = False


TEMPLATES: tuple[UserTextTemplate, ...] = (
    UserTextTemplate(
        "segfault",
        rf"^(?P<comm>{COMM})\[\d+\]: segfault at {_HEX} ip {_HEX} sp {_HEX} error "
        rf"[0-9a-f]+(?: cpu \d+)?{_CPU}{_VMA}$",
        "{comm}[4242]: segfault at 0 ip 0000000000401106 sp 00007ffd5a1e3c50 error 6 in "
        "{file}[401000+1000] likely on CPU 1 (core 1, socket 0)",
        "arch/x86/mm/fault.c show_signal_msg: '%s%s[%d]: segfault at %lx ip %px sp %px "
        "error %lx' + mm/memory.c print_vma_addr ' in %s[%lx+%lx]' (3.10+; '(null)' for "
        "NULL before 4.15; ' likely on CPU %d (core %d, socket %d)' 6.2+; ' in "
        "%s[%lx,%lx+%lx]' 6.13+, as 6.18 printed here)"),
    UserTextTemplate(
        "trap",
        rf"^(?:traps: )?(?P<comm>{COMM})\[\d+\] (?:trap |general protection |)"
        r"[\s\S]{0,64}? ip:[0-9a-f]+ sp:[0-9a-f]+ error:[0-9a-f]+"
        rf"{_CPU}{_VMA}$",
        "traps: {comm}[4242] trap divide error ip:401106 sp:7ffd5a1e3c50 error:0 in "
        "{file}[401000+1000]",
        "arch/x86/kernel/traps.c do_trap / show_signal: '%s[%d] %s%s ip:%lx sp:%lx "
        "error:%lx' (pr_fmt 'traps: '), general protection '%s[%d] general protection "
        "fault ip:%lx sp:%lx error:%lx'"),
    UserTextTemplate(
        "arm64_unhandled",
        rf"^(?P<comm>{COMM})\[\d+\]: unhandled (?P<rest>[\s\S]*)$",
        "{comm}[4242]: unhandled exception: DABT (lower EL), ESR 0x0000000092000006, "
        "level 0 translation fault in {file}[400000+1000]",
        "arch/arm64/kernel/traps.c arm64_show_signal: '%s[%d]: unhandled exception: ' "
        "(4.19+), arch/arm64/mm/fault.c __do_user_fault: '%s[%d]: unhandled %s (%d) at "
        "0x%08lx, esr 0x%03x' (to 4.18)"),
    UserTextTemplate(
        "bad_frame",
        rf"^(?P<comm>{COMM})\[\d+\] bad frame in (?P<rest>[\s\S]*)$",
        "{comm}[4242] bad frame in rt_sigreturn frame:00007ffd5a1e3c50 ip:401106 "
        "sp:7ffd5a1e3c50 orax:ffffffffffffffff in {file}[401000+1000]",
        "arch/x86/kernel/signal.c signal_fault: '%s[%d] bad frame in %s frame:%p ip:%lx "
        "sp:%lx orax:%lx'"),
    UserTextTemplate(
        "fatal_signal",
        rf"^(?P<comm>{COMM})/\d+: potentially unexpected fatal signal \d+\.$",
        "{comm}/4242: potentially unexpected fatal signal 11.",
        "kernel/signal.c print_fatal_signal: '%s/%d: potentially unexpected fatal signal "
        "%d.' (to 4.9; later the line carries no name)"),
    UserTextTemplate(
        "dump_stack_comm",
        rf"^CPU: \d+ (?:UID: \d+ )?PID: \d+ Comm: (?P<comm>{COMM}) (?:Not tainted|Tainted:)"
        r" (?P<rest>[\s\S]*)$",
        "CPU: 1 PID: 4242 Comm: {comm} Not tainted 6.1.0 #1",
        "lib/dump_stack.c dump_stack_print_info: 'CPU: %d PID: %d Comm: %.20s %s%s %s "
        "%.*s' ('UID: %u' 6.9+)",
        reports=True),
    UserTextTemplate(
        "oom_invoked",
        rf"^(?P<comm>{COMM}) invoked oom-killer: (?P<rest>[\s\S]*)$",
        "{comm} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "mm/oom_kill.c dump_header: '%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, "
        "oom_score_adj=%hd'",
        reports=True),
    UserTextTemplate(
        "oom_killed",
        r"^(?:[A-Za-z ()_]{0,48}: )?Kill(?:ed)? process \d+,? (?:UID \d+, )?"
        rf"\((?P<comm>{COMM})\)(?P<rest>,? (?:UID \d+, )?(?:total-vm|score)[\s\S]*)$",
        "Out of memory: Killed process 4242 ({comm}) total-vm:10000kB, anon-rss:9000kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:100kB oom_score_adj:0",
        "mm/oom_kill.c: 'Killed process %d (%s) total-vm:...', 'Kill process %d (%s) "
        "score %u or sacrifice child' (to 5.0), 'Killed process %d, UID %u, (%s) ...' (4.x "
        "vendor kernels), '%s: Killed process ...' (5.1+)",
        reports=True),
    UserTextTemplate(
        "oom_reaped",
        rf"^oom_reaper: reaped process \d+ \((?P<comm>{COMM})\), (?P<rest>[\s\S]*)$",
        "oom_reaper: reaped process 4242 ({comm}), now anon-rss:0kB, file-rss:0kB, "
        "shmem-rss:0kB",
        "mm/oom_kill.c oom_reap_task_mm: 'oom_reaper: reaped process %d (%s), now "
        "anon-rss:%lukB, ...' (4.6+)",
        reports=True),
    UserTextTemplate(
        "oom_summary",
        r"^oom-kill:constraint=[A-Z_]+,(?P<rest>[\s\S]*)$",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/x,task_memcg=/x,task={comm},pid=4242,uid=1000",
        "mm/oom_kill.c dump_oom_summary: 'oom-kill:constraint=%s,nodemask=%*pbl,cpuset=%s,"
        "mems_allowed=%*pbl,...,task=%s,pid=%d,uid=%d' (4.19+; cgroup paths and the name)",
        reports=True),
    UserTextTemplate(
        "oom_task_row",
        r"^\[ *\d+\] +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +-?\d+ (?P<comm>[\s\S]*)$",
        "[   4242]  1000  4242     2500     2250    40960        0             0 {comm}",
        "mm/oom_kill.c dump_task: '[%7d] %5d %5d %8lu %8lu %8ld %8lu         %5hd %s'",
        reports=True),
    UserTextTemplate(
        "alloc_failure",
        rf"^(?P<comm>{COMM}): page allocation (?P<rest>(?:failure|stalls for)[\s\S]*)$",
        "{comm}: page allocation failure: order:10, mode:0x40cc0(GFP_KERNEL|__GFP_COMP), "
        "nodemask=(null),cpuset=/,mems_allowed=0",
        "mm/page_alloc.c warn_alloc: '%s: %pV, mode:%#x(%pGg), nodemask=%*pbl' with "
        "'page allocation failure: order:%u' (and 'page allocation stalls for %ums' 4.14)",
        reports=True),
    UserTextTemplate(
        "hung_task",
        rf"^INFO: task (?P<comm>{COMM}):(?P<pid>\d+) blocked for more than \d+ seconds\.",
        "INFO: task {comm}:4242 blocked for more than 120 seconds.",
        "kernel/hung_task.c check_hung_task: 'INFO: task %s:%d blocked for more than %ld "
        "seconds.'",
        reports=True),
    UserTextTemplate(
        "task_state",
        rf"^task:(?P<comm>{COMM}) +state:[A-Za-z] (?P<rest>[\s\S]*)$",
        "task:{comm:<15.15} state:D stack:0     pid:4242  ppid:1      flags:0x00004002",
        "kernel/sched/core.c sched_show_task: 'task:%-15.15s state:%c' (5.9+)",
        reports=True),
    UserTextTemplate(
        "task_state_old",
        r"^(?P<comm>[\s\S]{15}) [RSDTtXZPIKWN] +(?P<rest>[0-9a-f ]+0x[0-9a-f]{8})$",
        "{comm:<15.15} D ffff8880 0  4242      1 0x00000000",
        "kernel/sched/core.c sched_show_task: '%-15.15s %c' + '%0*lx %5lu %5d %6d 0x%08lx' "
        "(to 5.8)",
        reports=True),
    UserTextTemplate(
        "comm_pid_notice",
        rf"^(?:mmap: )?(?P<comm>{COMM}) \(\d+\):? (?P<rest>(?:drop_caches: "
        r"|Attempt to access syslog|VmData \d+ exceed data ulimit|/proc/\d+/oom_adj is "
        r"deprecated|used greatest stack depth: |uses deprecated remap_file_pages)[\s\S]*)$",
        "{comm} (4242): drop_caches: 3",
        "mm/drop_caches.c '%s (%d): drop_caches: %d'; kernel/printk check_syslog_permissions"
        " '%s (%d): Attempt to access syslog ...'; mm/mmap.c '%s (%d): VmData %lu exceed "
        "data ulimit %lu. ...' and '%s (%d) uses deprecated remap_file_pages() syscall' "
        "(pr_fmt 'mmap: ' 4.x+); fs/proc/base.c '%s (%d): /proc/%d/oom_adj is deprecated, "
        "...'; kernel/exit.c check_stack_usage '%s (%d) used greatest stack depth: ...'"),
    UserTextTemplate(
        "beyond_end_of_device",
        rf"^(?P<comm>{COMM}): attempt to access beyond end of device(?P<rest>[\s\S]*)$",
        "{comm}: attempt to access beyond end of device\nsda1: rw=0, want=8, limit=4",
        "block/blk-core.c bio_check_eod: '%s: attempt to access beyond end of device\\n"
        "%pg: rw=%d, sector=%llu, nr_sectors = %u limit=%llu' (5.10+; the issuing process)",
        reports=True),
    UserTextTemplate(
        "arm64_syscall",
        rf"^(?P<comm>{COMM})\[\d+\]: syscall \d+(?P<rest>[\s\S]*)$",
        "{comm}[4242]: syscall 999",
        "arch/arm64/kernel/traps.c do_ni_syscall: '%s[%d]: syscall %d' (3.10-4.15)"),
    UserTextTemplate(
        "deprecation_warning",
        r"^(?:capability: )?warning: (?:process )?`(?P<comm>[\s\S]{0,15})' "
        r"(?P<rest>[\s\S]*)$",
        "capability: warning: `{comm}' uses 32-bit capabilities (legacy support in use)",
        "kernel/capability.c warn_legacy_capability_use: 'warning: `%s' uses 32-bit "
        "capabilities ...' (pr_fmt 'capability: ' 4.x+); net/wireless/wext-core.c: "
        "'warning: `%s' uses wireless extensions ...'; kernel/sysctl_binary.c: 'warning: "
        "process `%s' used the deprecated sysctl system call ...'"),
    UserTextTemplate(
        "oom_cpuset",
        rf"^(?P<comm>{COMM}) cpuset=(?P<rest>[\s\S]*)$",
        "{comm} cpuset=/ mems_allowed=0",
        "mm/oom_kill.c dump_header via cpuset_print_current_mems_allowed: '%s cpuset=%s "
        "mems_allowed=%*pbl' (to 4.18)",
        reports=True),
    UserTextTemplate(
        "null_argv",
        # both paths as one field: linear to match, and masking " launched " is harmless
        r"^process '(?P<path>[\s\S]*)' with NULL argv",
        "process '/tmp/{file}' launched '/tmp/{file}' with NULL argv: empty string added",
        "fs/exec.c do_execveat_common (5.18+): \"process '%s' launched '%s' with NULL argv: "
        "empty string added\""),
    UserTextTemplate(
        "soft_lockup_task",
        r"^(?P<head>(?:(?:NMI )?watchdog: )?BUG: soft lockup - CPU#\d+ stuck for \d+s! )"
        rf"\[(?P<comm>{COMM}):\d+\]$",
        "watchdog: BUG: soft lockup - CPU#2 stuck for 23s! [{comm}:4242]",
        "kernel/watchdog.c watchdog_timer_fn: '... stuck for %us! [%s:%d]' (the task on "
        "the CPU)",
        reports=True),
    UserTextTemplate(
        "exec_stack",
        r"^process '(?P<path>[\s\S]*)' started with executable stack$",
        "process '{file}' started with executable stack",
        "fs/exec.c setup_arg_pages (5.8+): \"process '%s' started with executable stack\""),
    UserTextTemplate(
        "split_lock",
        rf"^x86/split lock detection: #(?:AC|DB): (?P<comm>{COMM})/\d+ (?P<rest>[\s\S]*)$",
        "x86/split lock detection: #AC: {comm}/4242 took a split_lock trap at address: "
        "0x401106",
        "arch/x86/kernel/cpu/bus_lock.c split_lock_warn: '#AC: %s/%d took a split_lock "
        "trap at address: 0x%lx' (5.7+), '#DB: %s/%d took a bus_lock trap ...'"),
    UserTextTemplate(
        "umip",
        rf"^umip: (?P<comm>{COMM})\[\d+\] (?P<rest>[\s\S]*)$",
        "umip: {comm}[4242] ip:401106 sp:7ffd5a1e3c50: SGDT instruction cannot be used by "
        "applications.",
        "arch/x86/kernel/umip.c umip_pr_warn: '%s[%d] ip:%lx sp:%lx: %pV' (4.15+)"),
    UserTextTemplate(
        "vsyscall",
        rf"^(?:vsyscall: )?(?P<comm>{COMM})\[\d+\] (?P<rest>(?:emulated|vsyscall attempted"
        r"|illegal int 0x80|attempted)[\s\S]*)$",
        "{comm}[4242] vsyscall attempted with vsyscall=none ip:ffffffffff600400 cs:33 "
        "sp:7ffd5a1e3c50 ax:0 si:0 di:0",
        "arch/x86/entry/vsyscall/vsyscall_64.c warn_bad_vsyscall: '%s%s[%d] %s ip:%lx "
        "cs:%lx sp:%lx ax:%lx si:%lx di:%lx'"),
    UserTextTemplate(
        "audit",
        r"^audit: type=\d+ audit\([0-9.:]+\): (?P<rest>[\s\S]*)$",
        'audit: type=1400 audit(1700000000.123:42): apparmor="DENIED" operation="open" '
        'profile="p" name="/tmp/{file}" pid=4242 comm="{comm}" requested_mask="r"',
        "kernel/audit.c audit_log_start: 'audit: type=%d audit(%llu.%03lu:%u): ' then "
        "fields naming the process (comm=, exe=, name=, path=)"),
    UserTextTemplate(
        "ext4_comm",
        rf"^(?P<head>EXT4-fs [a-z]+ \(device [^)]*\): [\s\S]*?)comm (?P<comm>{COMM}): "
        r"(?P<rest>[\s\S]*)$",
        "EXT4-fs error (device sda1): ext4_lookup:1855: inode #2: comm {comm}: deleted "
        "inode referenced: 12",
        "fs/ext4/super.c __ext4_error_inode: '... inode #%lu: comm %s: %pV' (the name of "
        "the process that touched the inode)",
        reports=True),
    UserTextTemplate(
        "nvrm_xid_name",
        rf"^(?P<head>NVRM: Xid \([^)]*\): \d+, pid=[^,]*, )name=(?P<comm>{COMM}), "
        r"(?P<rest>[\s\S]*)$",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name={comm}, Graphics SM Warp Exception",
        "open-gpu-kernel-modules kernel_rc.c: 'NVRM: Xid (PCI:%04x:%02x:%02x): %d, "
        "pid=%s, name=%s, %s' (the process that owned the channel)",
        reports=True),
)

_GROUPS = ("comm", "file", "path", "rest")


@cache
def _compiled() -> tuple[tuple[re.Pattern[str], ...], re.Pattern[str]]:
    """Each template's expression, and one screen of them all (most lines are none)."""
    each = tuple(re.compile(t.regex) for t in TEMPLATES)
    unnamed = (re.sub(r"\(\?P<[a-z]+>", "(?:", t.regex) for t in TEMPLATES)
    return each, re.compile("|".join(f"(?:{rx})" for rx in unnamed))


def prepare() -> None:
    """Compile the templates now (at a source's start), so that the first kernel line
    after it does not wait for them."""
    _compiled()


def mask(line: str) -> str:
    """``line`` with every field a process chose replaced by :data:`MASK` (the line
    itself when it is none of :data:`TEMPLATES`)."""
    each, screen = _compiled()
    if not screen.match(line):
        return line
    for rx in each:
        found = rx.match(line)
        if found is None:
            continue
        spans = sorted(found.span(g) for g in _GROUPS
                       if g in rx.groupindex and found.span(g)[0] >= 0)
        out, at = [], 0
        for start, end in spans:
            out.append(line[at:start])
            out.append(MASK)
            at = end
        out.append(line[at:])
        return "".join(out)
    return line


def named_task(line: str) -> int | None:
    """The PID the kernel printed beside a process's name in ``line`` (a hung task), or
    None: the one thing in such a line the process did not choose."""
    each, _ = _compiled()
    for rx in each:
        if "pid" in rx.groupindex and (found := rx.match(line)) is not None:
            return int(found["pid"])
    return None


def spoofable(pattern: str) -> str | None:
    """How an unprivileged process could fire ``pattern`` through a line the kernel logs
    for it, or None if none can: the pattern must not match any template's own words
    (unless the template reports a real event), nor the line with every user field
    filled with text the pattern matches."""
    rx = re.compile(pattern)
    wanted = example_match(pattern)
    for t in TEMPLATES:
        plain = bool(rx.search(mask(t.sample.format(comm="x", file="x"))))
        if plain and not t.reports:
            return _said(t, "the kernel's words there")
        if not plain and wanted is not None and \
                rx.search(mask(t.sample.format(comm=wanted[:15], file=wanted))):
            return _said(t, "its own text")
    return None


def _said(t: UserTextTemplate, through: str) -> str:
    return (f"matches the {t.name!r} line the kernel logs for any process that asks "
            f"({t.origin.split(' ')[0]}), through {through}: an unprivileged process "
            f"can fire it")
