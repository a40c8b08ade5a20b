"""guardian.hostio.host: paths under a relocated host root, and the plain reads and writes
of kernel files every source and action goes through."""

from __future__ import annotations

from pathlib import Path

from guardian.hostio.host import (
    boot_id,
    exists,
    is_dir,
    read_kernel_file,
    resolve_under,
    write_kernel_file,
)


def test_an_absolute_link_points_into_the_host_root_not_out_of_it(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # as on a real host: /var/run -> /run
    assert resolve_under(root, "/var/run/reboot-required") == root / "run" / "reboot-required"


def test_dot_dot_and_relative_links_never_leave_the_root(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "up").symlink_to("../../../../..")
    assert resolve_under(root, "/../../etc/passwd") == root / "etc" / "passwd"
    assert resolve_under(root, "/etc/up/shadow") == root / "shadow"


def test_a_link_loop_ends_after_a_bounded_number_of_hops(tmp_path: Path) -> None:
    root = tmp_path / "host"
    root.mkdir()
    (root / "a").symlink_to("/b")
    (root / "b").symlink_to("/a")
    resolve_under(root, "/a/file")  # returns: it does not follow the loop for ever


def test_a_knob_that_is_not_there_is_an_error_never_created(tmp_path: Path) -> None:
    try:
        write_kernel_file(tmp_path / "memory.reclaim", "64M")
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a missing knob was written")
    assert not exists(tmp_path / "memory.reclaim")


def test_kernel_files_are_read_whole_and_written_in_one_write(tmp_path: Path) -> None:
    knob = tmp_path / "memory.reclaim"
    knob.write_text("")
    write_kernel_file(knob, "64M")
    assert read_kernel_file(knob) == "64M"
    big = tmp_path / "stat"
    big.write_bytes(b"cpu 1 2 3\n" * 20_000)  # larger than one read
    assert read_kernel_file(big) == "cpu 1 2 3\n" * 20_000
    assert exists(big) and not is_dir(big) and is_dir(tmp_path)
    assert not exists(tmp_path / "gone")


def test_a_boot_id_that_cannot_be_read_is_empty_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("0b5c2a1e-0000-4000-8000-000000000001\n")
    assert boot_id(tmp_path / "boot_id") == "0b5c2a1e-0000-4000-8000-000000000001"
    assert boot_id(tmp_path / "nowhere") == ""
