"""The flight recorder's parts that need no perf: folding ``perf script`` output (as this
host's perf 6.1 printed it, ``-F comm,tid,time,ip,sym,dso``), the ring's size, and what
it does when it is not running. tests/system/test_flight_recorder.py runs the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.hostio import flight
from guardian.hostio.flight import FlightRecorder, perf_message, ring_pages
from guardian.hostio.perfscript import fold_perf_script

SCRIPT = """\
zzbusyzz 24967 13855.856958:
\tffffffff8170da91 fdget_pos ([kernel.kallsyms])
\tffffffff816dbf68 ksys_write ([kernel.kallsyms])
\tffffffff8223b5d1 do_syscall_64 ([kernel.kallsyms])
\tffffffff81000130 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
\t           f8350 __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)

Web Content 311 13855.866958:
\t    560d0e67c0b0 [unknown] (/usr/lib/firefox/libxul.so)
\t    7f5a58658ea0 [unknown] ([unknown])

zzbusyzz 24967 13855.877358:
\tffffffff816dbf68 ksys_write ([kernel.kallsyms])
\tffffffff8223b5d1 do_syscall_64 ([kernel.kallsyms])
\tffffffff81000130 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
\t           f8350 __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)

ena;odd 7 13856.856958:
\tffffffffc0a01234 ena_io_poll ([ena])
\tffffffff8223b5d1 net_rx_action ([kernel.kallsyms])

zzbusyzz 24967 13856.877358:
\tffffffff816dbf68 ksys_write ([kernel.kallsyms])
\tffffffff8223b5d1 do_syscall_64 ([kernel.kallsyms])
\tffffffff81000130 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
\t           f8350 __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)
""".replace(":\n", ": \n")  # perf ends a sample's first line with a space


def test_perf_script_folds_root_first_with_kernel_frames_marked() -> None:
    stacks, span = fold_perf_script(SCRIPT.splitlines())
    assert stacks == {
        "zzbusyzz;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "ksys_write_[k];fdget_pos_[k]": 1,
        "zzbusyzz;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "ksys_write_[k]": 2,
        # a comm with a space; an unnamed frame is its object's name
        "Web Content;[unknown];[libxul.so]": 1,
        # ';' separates frames: a comm's own becomes ':'; a module's frame is a kernel one
        "ena:odd;net_rx_action_[k];ena_io_poll_[k]": 1,
    }
    assert span == pytest.approx(1.0204)


def test_ring_is_split_over_the_cpus_in_powers_of_two_of_pages() -> None:
    assert ring_pages(8, 2) == 1024  # 4 MiB each
    assert ring_pages(8, 3) == 512  # 2.67 MiB each: the power of two below
    assert ring_pages(8, 96) == 16
    assert ring_pages(1, 4096) == 4  # never below 4 pages
    for cpus in (1, 2, 3, 7, 64, 96, 192):
        assert ring_pages(8, cpus) * cpus * 4096 <= 8 << 20 or ring_pages(8, cpus) == 4


def test_the_command_is_bounded_and_overwrites(tmp_path: Path) -> None:
    rec = FlightRecorder(frequency=19, ring_mb=8, perf="/usr/bin/perf", workdir=tmp_path)
    argv = rec.argv(cpus=2)
    assert argv[:2] == ["/usr/bin/perf", "record"]
    assert {"--overwrite", "--switch-output=signal", "--switch-max-files=2", "-a",
            "-g"} <= set(argv)
    assert argv[argv.index("-F") + 1] == "19" and argv[argv.index("-m") + 1] == "1024"
    assert argv[argv.index("-o") + 1] == str(tmp_path / "flight.data")


def test_not_running_dumps_nothing_and_is_not_current(tmp_path: Path) -> None:
    rec = FlightRecorder(workdir=tmp_path)
    assert not rec.running
    assert rec.dump(tmp_path / "bundle") is None
    assert not (tmp_path / "bundle").exists()
    assert flight.current() is None
    rec.stop()  # a stop without a start is nothing



# what this host's perf 6.1 wrote on stderr, run as nobody (perf_event_paranoid 2)
REFUSED = """\
Error:
Access to performance monitoring and observability operations is limited.
Consider adjusting /proc/sys/kernel/perf_event_paranoid setting to open
access to performance monitoring and observability operations for processes
without CAP_PERFMON, CAP_SYS_PTRACE or CAP_SYS_ADMIN Linux capability.
More information can be found at 'Perf events and tool security' document:
https://www.kernel.org/doc/html/latest/admin-guide/perf-security.html
perf_event_paranoid setting is 2:
  -1: Allow use of (almost) all events by all users
      Ignore mlock limit after perf_event_mlock_kb without CAP_IPC_LOCK
>= 0: Disallow raw and ftrace function tracepoint access
>= 1: Disallow CPU event access
>= 2: Disallow kernel profiling
To make the adjusted perf_event_paranoid setting permanent preserve it
in /etc/sysctl.conf (e.g. kernel.perf_event_paranoid = <setting>)
"""


def test_a_perf_that_may_not_profile_is_said_from_its_first_words() -> None:
    """Issue 43's review: the warning held the tail of perf's message, cut mid-word
    ("status 255 ol security' document: …"), without the CAP_PERFMON it needs.
    tests/system/test_flight_recorder.py sees it from the real perf."""
    said = perf_message(["[ perf record: Woken up 1 times to write data ]",
                         *REFUSED.splitlines()])
    assert said.startswith("Error: Access to performance monitoring and observability "
                           "operations is limited. Consider adjusting"), said
    assert "without CAP_PERFMON, CAP_SYS_PTRACE or CAP_SYS_ADMIN Linux capability." in said
    # bounded, at a line's end: what follows is left out, said with "…"
    assert len(said) <= 600 and said.endswith(" …"), said
    kept = said.removesuffix(" …")
    assert any(kept.endswith(line.strip()) for line in REFUSED.splitlines()), said
    # a line longer than the bound alone: its words that fit
    assert perf_message(["word " * 200]) == ("word " * 120).strip() + " …"
