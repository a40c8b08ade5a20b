"""A real systemd, booted in a systemd-nspawn container, for tests and benchmarks of
what talks to systemd (guardian's own, and a plugin's), on a host whose PID 1 is not one.
The container root is built once with debootstrap into a cache directory outside the
repository (never committed) and booted with a volatile overlay, so every boot starts
clean. Commands run inside through nsenter.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guardian.core.errors import GuardianError

CACHE = Path(os.environ.get("GUARDIAN_TEST_CACHE", "/var/cache/guardian-test"))
PACKAGES = "systemd,systemd-sysv,dbus,procps,python3,python3-venv"
ROOT = CACHE / f"rootfs-bookworm-{hashlib.sha256(PACKAGES.encode()).hexdigest()[:8]}"


class RootUnavailable(GuardianError, RuntimeError):
    """The container root cannot be built here (no Debian mirror, debootstrap failed): the
    tests that need it are skipped with this, not failed."""


def apt_mirror() -> str:
    """The Debian mirror this machine's apt already uses (never hard-coded here)."""
    texts = [p.read_text() for p in Path("/etc/apt/sources.list.d").glob("*.sources")]
    for text in texts:
        for block in text.split("\n\n"):
            if re.search(r"^Suites:.*\bbookworm\b", block, re.M) and "security" not in block:
                m = re.search(r"^URIs:\s*(\S+)", block, re.M)
                if m:
                    return m.group(1)
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        m = re.search(r"^deb\s+(\S+)\s+bookworm\s", legacy.read_text(), re.M)
        if m:
            return m.group(1)
    raise RootUnavailable("no Debian bookworm mirror in this machine's apt sources, to build "
                          "the container root from with debootstrap")


def build_root() -> Path:
    """The cached container root; built on first use (about 75 s)."""
    if (ROOT / "usr/lib/systemd/systemd").exists():
        return ROOT
    tmp = ROOT.with_name(ROOT.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}",
                          "bookworm", str(tmp), apt_mirror()], capture_output=True, text=True,
                         timeout=900)
    if out.returncode != 0:
        raise RootUnavailable(f"debootstrap of the container root into {tmp} exited "
                              f"{out.returncode}: {(out.stderr or out.stdout)[-600:].strip()}")
    tmp.rename(ROOT)
    return ROOT


def nspawn_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs systemd-container, debootstrap)"
    return None


def refused(argv: Sequence[str], markers: Sequence[str] = (), timeout: float = 120
            ) -> str | None:
    """Whether this host refuses to start a container: ``argv`` starts one that runs
    ``true`` (``podman run --rm IMAGE true``, ``systemd-nspawn -D ROOT true``). None when it
    starts; the command's own message when it fails and says one of ``markers`` (any
    failure when there are none): the reason a test that needs it is skipped with. A
    failure that says none of them is None too, so the tests run and fail on it: it is not
    the host refusing (podman's "image not known" is guardian's own tests' fault)."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return f"{argv[0]} is not installed"
    if out.returncode == 0:
        return None
    said = (out.stderr.strip() or out.stdout.strip())[-600:]
    if markers and not any(m in said for m in markers):
        return None
    return (f"this host cannot start a container: `{' '.join(argv)}` exited "
            f"{out.returncode}: {said or '(it said nothing)'}")


@functools.cache
def nspawn_refused(root: Path) -> str | None:
    """Whether systemd-nspawn can run a container from ``root`` here (probed once per
    process: ``true`` in a volatile container, no boot; well under a second here)."""
    return refused(["systemd-nspawn", "-q", "-D", str(root), "-M", f"guardian-probe-{os.getpid()}",
                    "--register=no", "--keep-unit", "--volatile=overlay", "--", "/bin/true"],
                   timeout=60)


@dataclass
class Container:
    """A booted container: ``leader`` is its systemd (PID 1 inside)."""

    nspawn: subprocess.Popen[bytes]
    leader: int

    @property
    def enter(self) -> list[str]:
        """argv prefix that runs a command inside the container."""
        return ["nsenter", "--target", str(self.leader), "--all", "--"]

    def run(self, *argv: str, check: bool = True, timeout: float = 60,
            env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        cmd = [*self.enter, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", *envs, *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=check, input=input)

    @property
    def private_socket(self) -> str:
        """systemd's private D-Bus socket, as the host reaches it."""
        return f"/proc/{self.leader}/root/run/systemd/private"

    def python_in_pid_namespace(self, code: str, *args: str) -> subprocess.Popen[str]:
        """This interpreter running ``code`` in the container's PID namespace (systemd
        refuses a peer whose PID it cannot see), with text pipes to talk to it by line."""
        return subprocess.Popen(
            ["nsenter", "--target", str(self.leader), "--pid", "--", sys.executable, "-c",
             code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def write(self, path: str, text: str) -> None:
        """Write a file inside the container (through tee: argv, no shell)."""
        self.run("tee", path, input=text)

    def wait_running(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.2)
        raise TimeoutError(f"container systemd not running after {timeout}s: {state!r}")


@contextlib.contextmanager
def booted(binds: list[tuple[str, str]] | None = None,
           name: str = "guardian-test",
           rw_binds: list[tuple[str, str]] | None = None,
           extra_args: Sequence[str] = (),
           env: Mapping[str, str] | None = None) -> Iterator[Container]:
    """Boot a clean container (volatile overlay), yield it, power it off. ``extra_args``
    go to systemd-nspawn (``--private-network``...), ``env`` is added to its environment
    (``SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1``)."""
    why = nspawn_unavailable()
    if why:
        import pytest  # here: the benchmarks boot containers too, without pytest

        pytest.skip(f"systemd-nspawn test skipped: {why}")
    try:
        root = build_root()
    except RootUnavailable as exc:
        why = str(exc)
    else:
        why = nspawn_refused(root)
    if why:
        import pytest

        pytest.skip(f"systemd-nspawn test skipped: {why}")
    args = ["systemd-nspawn", "-q", "-D", str(root), "-M", f"{name}-{os.getpid()}",
            "--boot", "--register=no", "--keep-unit", "--console=read-only",
            "--volatile=overlay"]
    for src, dst in binds or []:
        args.append(f"--bind-ro={src}:{dst}")
    for src, dst in rw_binds or []:
        args.append(f"--bind={src}:{dst}")
    args.extend(extra_args)
    proc = subprocess.Popen(args, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        leader = 0
        deadline = time.monotonic() + 30
        while not leader and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {proc.returncode}")
            out = subprocess.run(["pgrep", "-P", str(proc.pid), "-x", "systemd"],
                                 capture_output=True, text=True).stdout.split()
            leader = int(out[0]) if out else 0
            time.sleep(0.05)
        if not leader:
            raise TimeoutError("container systemd did not start")
        c = Container(proc, leader)
        c.wait_running()
        yield c
    finally:
        if proc.poll() is None:
            with contextlib.suppress(Exception):
                subprocess.run(["nsenter", "--target", str(leader), "--all", "--",
                                "systemctl", "poweroff"], timeout=10, capture_output=True)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
