"""The probe that decides whether the container tests can run here at all
(guardian.testing.nspawn.refused): a host whose runtime cannot start a container is a
skip with the runtime's own words, never an error; anything else still fails the tests.

Before (issue 40): on a machine whose podman runs crun (no runc) the three image tests
errored with "cgroups in hybrid mode not supported". The runtimes here are stand-ins:
shell scripts that print what podman with crun prints on such a host and exit as it does
(126), so the skip path is tested on a machine whose podman works."""

from __future__ import annotations

from pathlib import Path

from guardian.testing.nspawn import refused
from tests.support.podman import RUNTIME_REFUSED

CRUN_HYBRID = ("Error: OCI runtime error: crun: cgroups in hybrid mode not supported, drop "
               "all controllers from cgroupv2")


def _runtime(tmp_path: Path, stderr: str, code: int) -> list[str]:
    """A stand-in runtime: prints ``stderr`` there, exits ``code``."""
    script = tmp_path / f"fake-podman-{code}"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{stderr}' >&2\nexit {code}\n")
    script.chmod(0o755)
    return [str(script), "run", "--rm", "--network=none", "debian:bookworm-slim", "true"]


def test_a_runtime_that_refuses_this_hosts_cgroups_is_a_skip_in_its_own_words(
        tmp_path: Path) -> None:
    argv = _runtime(tmp_path, CRUN_HYBRID, 126)
    why = refused(argv, RUNTIME_REFUSED)
    assert why is not None
    assert "cgroups in hybrid mode not supported" in why and "exited 126" in why
    assert why.startswith("this host cannot start a container: ")


def test_a_failure_that_is_not_the_runtime_refusing_is_left_to_fail_the_tests(
        tmp_path: Path) -> None:
    argv = _runtime(tmp_path, "Error: debian:bookworm-slim: image not known", 125)
    assert refused(argv, RUNTIME_REFUSED) is None
    # with no markers (systemd-nspawn running true: any failure is nspawn's), it is one
    assert "image not known" in (refused(argv) or "")


def test_a_runtime_that_starts_the_container_is_no_reason(tmp_path: Path) -> None:
    assert refused(_runtime(tmp_path, "", 0), RUNTIME_REFUSED) is None
    assert refused([str(tmp_path / "no-such-runtime"), "run"]) == (
        f"{tmp_path / 'no-such-runtime'} is not installed")
