"""The DaemonSet's image, built and started where no base image can be pulled: the same
root filesystem the Containerfile makes (Debian 12 with the .deb of packaging/build in
it), assembled by packaging/rootfs from the debootstrap root the systemd tests use, then
run as the DaemonSet runs it: the host's network and PID namespaces, /proc, /sys and
/dev/kmsg mounted (a plain chroot in a mount namespace of its own), started with the
DaemonSet's own arguments; it ticks and answers /healthz, and `guardian health` inside it
agrees."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from .conftest import REPO
from .nspawn import build_root, nspawn_unavailable

# Boots a container or builds packages: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_images_root_filesystem_starts_ticks_and_answers_healthz(
        dist: Path, tmp_path: Path) -> None:
    why = nspawn_unavailable()  # debootstrap and the cached Debian 12 root
    if why:
        pytest.skip(why)
    [deb] = dist.glob("*.deb")
    rootfs = tmp_path / "rootfs"
    subprocess.run([str(REPO / "packaging" / "rootfs"), str(rootfs), str(deb)], check=True,
                   env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "BASE": str(build_root())},
                   capture_output=True, timeout=600)
    assert (rootfs / "opt/guardian/bin/guardian").exists()
    ds = next(d for d in yaml.safe_load_all(
        (REPO / "deploy/kubernetes/daemonset.yaml").read_text()) if d)
    [container] = ds["spec"]["template"]["spec"]["containers"]
    port = _free_port()
    args = [a.replace("$(NODE_IP)", "127.0.0.1") for a in container["args"]]
    mounts = " && ".join([
        f"mount --rbind /proc {rootfs}/proc",
        f"mount --rbind /sys {rootfs}/sys",
        f"touch {rootfs}/dev/kmsg && mount --bind /dev/kmsg {rootfs}/dev/kmsg",
    ])
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
         f'{mounts} && exec chroot {rootfs} /opt/guardian/bin/guardian "$@"', "guardian",
         *args, "--dry-run", f"--metrics-port={port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        body = ""
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                              timeout=2).read().decode()
                if body.startswith("ok: "):
                    break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        assert body.startswith("ok: the last tick completed"), body
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                         timeout=5).read().decode()
        assert "guardian_last_tick_timestamp_seconds " in metrics
        inside = subprocess.run(["chroot", str(rootfs), "/opt/guardian/bin/guardian",
                                 "health", f"--port={port}"], capture_output=True,
                                text=True, timeout=60)
        assert inside.returncode == 0 and inside.stdout.startswith("ok: "), inside.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
