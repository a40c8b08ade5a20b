"""The /dev/kmsg reader against its definition, Documentation/ABI/testing/dev-kmsg (the
kernel's; quoted beside each case), against this VM's real /dev/kmsg, and against
recordings in the format of kernels before and after 4.9."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.hostio.kmsg import BadRecord, parse_record
from guardian.sources.kmsg import KmsgSource
from tests.support.kernel import drop_caches, inject_kmsg, need_root

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global

ENA = "ena 0000:00:05.0 eth0: "


def _recording(tmp_path: Path, text: str | bytes, **config: object) -> KmsgSource:
    (tmp_path / "dev").mkdir(exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    (tmp_path / "dev" / "kmsg").write_bytes(data)
    return KmsgSource(Host(tmp_path), KmsgSource.Config(replay=True, **config))


def _count(src: KmsgSource, pattern: str) -> float:
    m = src.collect(1.0)["kmsg.matches"]
    assert isinstance(m, dict)
    n: float = m[labels_of({"pattern": pattern})]
    return n


def test_the_abi_documents_examples() -> None:
    """dev-kmsg: "7,160,424069,-;pci_root PNP0A03:00: host bridge window [io
    0x0000-0x0cf7] (ignored)" followed by " SUBSYSTEM=acpi" and " DEVICE=+acpi:PNP0A03:00";
    "30,340,5690716,-;udevd[80]: starting version 181". "The single decimal prefix number
    is composed of the 3 lowest bits being the syslog priority and the next 8 bits the
    syslog facility number." """
    rec = parse_record(b"7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  "
                       b"0x0000-0x0cf7] (ignored)\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n")
    assert (rec.facility, rec.level, rec.seq, rec.flag) == (0, 7, 160, "-")
    assert rec.text == "pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)"
    rec = parse_record(b"30,340,5690716,-;udevd[80]: starting version 181\n")
    assert (rec.facility, rec.level, rec.seq) == (3, 6, 340)  # daemon, info
    # "Future extensions might add more comma separated values before the terminating
    # ';'. Unknown fields and values should be gracefully ignored." (caller= since 5.1)
    rec = parse_record(b"6,341,5690800,-,caller=T80;NET: Registered protocol family 10\n")
    assert (rec.seq, rec.text) == (341, "NET: Registered protocol family 10")


def test_escapes_are_decoded_before_matching(tmp_path: Path) -> None:
    """dev-kmsg: "all non-printable characters and '\\' itself in the log message are
    escaped by "\\x00" C-style hex encoding" (and bytes of 127 and above, printk.c
    msg_add_ext_text): a line with a backslash or a UTF-8 name matches as printed."""
    assert parse_record(b"6,1,1,-;a\\x5cb \\xc3\\xa9\\x09tab\n").text == "a\\b \u00e9\ttab"
    src = _recording(tmp_path, "6,1,1,-;ena 0000:00:05.0 caf\\xc3\\xa9: Trigger reset is "
                               "on\n", facilities=["kern"])
    assert _count(src, "ena_reset_triggered") == 1


@pytest.mark.parametrize(("raw", "reason"), [
    (b"not a record at all", "header"),
    (b"6,x,1,-;text", "header"),
    (b"6,1,1,?;an unknown flag", "flags"),
    (b"6,1,1,-;\\xff\\xfe not UTF-8", "utf8"),
])
def test_unreadable_records_are_counted_and_skipped(
        tmp_path: Path, raw: bytes, reason: str) -> None:
    with pytest.raises(BadRecord) as bad:
        parse_record(raw)
    assert bad.value.reason == reason
    src = _recording(tmp_path, raw + b"\n6,9,9,-;" + ENA.encode() + b"Trigger reset is on\n")
    out = src.collect(1.0)
    assert out["kmsg.skipped"][labels_of({"reason": reason})] == 1  # type: ignore[index]
    assert out["kmsg.matches"][labels_of({"pattern": "ena_reset_triggered"})] == 1  # type: ignore[index]


def test_a_line_longer_than_any_record_is_skipped_and_reading_goes_on(tmp_path: Path) -> None:
    long = b"6,1,1,-;" + b"x" * 30000 + b"\n"
    src = _recording(tmp_path, long + b"6,2,2,-;" + ENA.encode() + b"Trigger reset is on\n")
    out = src.collect(1.0)
    assert out["kmsg.skipped"][labels_of({"reason": "too_long"})] == 1  # type: ignore[index]
    assert out["kmsg.matches"][labels_of({"pattern": "ena_reset_triggered"})] == 1  # type: ignore[index]


# A reset line printed in two pieces. Before 4.9, dev-kmsg: "A 'c' indicates a fragment of
# a line. All following fragments are flagged with '+'." Since 4.9 (printk.c
# msg_print_ext_header: LOG_CONT ? 'c' : '-'), a record flagged 'c' is a continuation of
# the line before it, and '+' is never printed.
BEFORE_4_9 = (f"4,10,100,c;{ENA}Device reset\n"
              "4,11,101,+; completed successfully\n"
              f"4,12,102,-;{ENA}Trigger reset is on\n")
SINCE_4_9 = (f"4,10,100,-;{ENA}Device reset\n"
             "4,11,101,c; completed successfully\n"
             f"4,12,102,-;{ENA}Trigger reset is on\n")


@pytest.mark.parametrize(("log", "generation"), [(BEFORE_4_9, "before-4.9"),
                                                  (SINCE_4_9, "4.9+")],
                         ids=["before-4.9", "4.9+"])
def test_fragments_join_as_each_kernel_generation_flags_them(
        tmp_path: Path, log: str, generation: str) -> None:
    src = _recording(tmp_path, log, continuation=generation)
    assert _count(src, "ena_reset_completed") == 1
    assert _count(src, "ena_reset_triggered") == 1


def test_a_4_9_continuation_read_with_the_old_meaning_is_not_joined(tmp_path: Path) -> None:
    """The meanings differ: read as a kernel before 4.9 would mean it, the 'c' record of
    a newer kernel starts a line of its own and the reset line is not whole."""
    src = _recording(tmp_path, SINCE_4_9, continuation="before-4.9")
    assert _count(src, "ena_reset_completed") == 0


def test_a_pattern_counts_once_per_line_however_many_fragments(tmp_path: Path) -> None:
    log = (f"4,10,100,-;{ENA}Trigger reset is on\n"
           "4,11,101,c; (more)\n4,12,102,c; (and more)\n")
    src = _recording(tmp_path, log, continuation="4.9+")
    assert _count(src, "ena_reset_triggered") == 1


def test_a_plus_flag_means_an_older_kernel_whatever_auto_guessed(tmp_path: Path) -> None:
    """'+' is printed only by kernels before 4.9: seeing one settles the meaning of 'c'
    for the rest of the log (a recording may come from another kernel than this one)."""
    log = ("6,1,1,c;first\n6,2,2,+; fragment\n" + BEFORE_4_9.replace("4,1", "4,2"))
    src = _recording(tmp_path, log)  # auto: this VM's kernel says 4.9+
    assert _count(src, "ena_reset_completed") == 1


def test_only_kernel_records_match_by_default(tmp_path: Path) -> None:
    """dev-kmsg: "It is not possible to inject messages from userspace with the facility
    number LOG_KERN (0), to make sure that the origin of the messages can always be
    reliably determined." A user-facility record (<12> = user.warning) that reads like
    the driver does not match unless the user facility is allowed."""
    log = f"12,1,1,-;{ENA}Trigger reset is on\n4,2,2,-;{ENA}Keep alive watchdog timeout.\n"
    src = _recording(tmp_path, log)
    assert _count(src, "ena_reset_triggered") == 0
    assert _count(src, "ena_keep_alive_timeout") == 1
    allowed = _recording(tmp_path, log, facilities=["kern", "user"])
    assert _count(allowed, "ena_reset_triggered") == 1


def test_a_line_written_into_the_real_dev_kmsg_cannot_fire_a_pattern() -> None:
    """The real device: a process writes the driver's reset line; the default source reads
    the record (its facility is user) and does not count it."""
    need_root()
    src = KmsgSource(Host())
    try:
        src.collect(0.0)
        before = src.records
        inject_kmsg(f"{ENA}Trigger reset is on")
        out = src.collect(1.0)
        assert src.records > before
        assert out["kmsg.matches"][labels_of({"pattern": "ena_reset_triggered"})] == 0  # type: ignore[index]
    finally:
        src.close()


def test_every_real_record_of_this_vm_parses() -> None:
    """This VM's /dev/kmsg from its first record: every record parses, and the kernel's
    own (facility 0) are among them."""
    need_root()
    drop_caches()  # the kernel logs "<comm> (<pid>): drop_caches: 1" (mm/drop_caches.c)
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    records = []
    try:
        while True:
            try:
                records.append(parse_record(os.read(fd, 8192)))
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue
    finally:
        os.close(fd)
    assert records
    assert any(r.facility == 0 for r in records)
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs)


def test_a_record_larger_than_the_buffer_grows_it_instead_of_wedging() -> None:
    """printk.c devkmsg_read: a record longer than the read() buffer is -EINVAL. Older
    kernels leave the position on it (read again with the same buffer: EINVAL forever);
    this VM's moves past it first (the record is gone). The real device, with the first
    buffer made tiny: the reader grows its buffer and goes on; the record it could not
    take is read (older kernels) or counted as skipped (newer ones), never dropped
    unseen."""
    need_root()
    src = KmsgSource(Host(), KmsgSource.Config(facilities=["kern", "user"]))
    try:
        src.collect(0.0)
        src.read_size = 16
        inject_kmsg(f"{ENA}Trigger reset is on")
        src.collect(1.0)
        assert src.read_size > 16
        inject_kmsg(f"{ENA}Trigger reset is on")
        matched = _count(src, "ena_reset_triggered")
        assert matched >= 1
        assert matched + src.skipped["too_long"] == 2, (matched, src.skipped)
        assert src.lost == 0  # a skipped record is not also counted lost
    finally:
        src.close()


def test_each_overwritten_record_is_counted_once() -> None:
    """dev-kmsg: on an overrun "the next read() will return -EPIPE, and the seek position
    be updated to the next available record"; the sequence numbers "allow to calculate the
    amount of lost messages". Every record between two reads is either read or lost, so
    records + lost is exactly the span of sequence numbers (before: EPIPE was counted on
    top of the gap). printk_devkmsg is set to 'on' for the flood and restored."""
    need_root()
    knob = Path("/proc/sys/kernel/printk_devkmsg")
    old = knob.read_text().strip()
    src = KmsgSource(Host())
    try:
        inject_kmsg("guardian-test: before the flood")
        src.collect(0.0)
        while src.last_seq is None:
            inject_kmsg("guardian-test: before the flood")
            src.collect(0.0)
        first_seq, read_before, lost_before = src.last_seq, src.records, src.lost
        knob.write_text("on\n")
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            for _ in range(12000):  # ~2.7 MB: more than the ring buffer holds
                os.write(fd, b"<7>guardian-test: flood " + b"x" * 200 + b"\n")
        finally:
            os.close(fd)
        src.collect(1.0)
        assert src.lost > lost_before
        assert src.last_seq is not None
        assert (src.records - read_before) + (src.lost - lost_before) \
            == src.last_seq - first_seq
    finally:
        knob.write_text(old + "\n")
        src.close()


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.binary(max_size=300),
    st.builds(lambda p, s, f, t: f"{p},{s},1,{f};{t}".encode(),
              st.integers(0, 200), st.integers(0, 50), st.sampled_from("-c+x"),
              st.text(max_size=80))), max_size=30))
def test_any_recording_is_read_without_a_crash(tmp_path: Path, chunks: list[bytes]) -> None:
    """Garbage, half records and fragments in any order: every line is a record read or a
    record skipped, and nothing raises."""
    src = _recording(tmp_path, b"\n".join(chunks) + b"\n", facilities=["kern", "user"])
    try:
        out = src.collect(1.0)
        assert isinstance(out["kmsg.records"], int)
        skipped = out["kmsg.skipped"]
        assert isinstance(skipped, dict) and all(v >= 0 for v in skipped.values())
    finally:
        src.close()


@pytest.mark.parametrize(("rx", "line", "hit"), [
    (r"^zzz|needle", "a line with a needle", True),      # one branch unanchored: searched
    (r"^needle", "a line with a needle", False),         # anchored: only at the start
    (r"^(?:a|b)|^[|^]needle", "^needle", True),           # '|' in a class is not a branch
    (r"(?i:^NEEDLE)", "needle at the start", True),       # a group first: searched, still ^
])
def test_the_screens_agree_with_the_patterns(rx: str, line: str, hit: bool) -> None:
    """Patterns anchored in every branch are screened at the line's start only; any other
    is searched. Either way a line is counted exactly when its pattern matches it."""
    src = KmsgSource(Host(Path("/nonexistent")), KmsgSource.Config(
        default_patterns=False, patterns={"p": rx}))
    assert (src.matches(line) == ["p"]) is hit
    assert (re.search(rx, line) is not None) is hit
