"""Talking to systemd through ``systemctl`` (argv, never a shell): the one place that
runs it and parses what it prints, for the systemd source and the systemd.unit action.

As root, systemctl talks to systemd's private socket, so it keeps working when the D-Bus
daemon is down or wedged; the argv prefix is configurable, so guardian in a container can
reach the host's systemd with ``["nsenter", "--target", "1", "--mount", "--", "systemctl"]``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "SYSTEMD_PAGER": "",
       "SYSTEMD_COLORS": "0"}


def run(systemctl: Sequence[str], *args: str, timeout: float
        ) -> subprocess.CompletedProcess[str]:
    """Run ``systemctl ARGS`` with a minimal environment; the exit status is the caller's
    to judge. Raises OSError or TimeoutExpired."""
    return subprocess.run([*systemctl, *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, check=False)


def cannot_run(systemctl: Sequence[str], exc: OSError) -> str:
    """One line naming the program that could not be run, and why."""
    return (f"cannot run {systemctl[0]!r} (the systemctl argv: {' '.join(systemctl)}): "
            f"{exc.strerror or exc}")


def output(systemctl: Sequence[str], *args: str, timeout: float) -> str:
    """What ``systemctl ARGS`` prints. Raises RuntimeError when it fails."""
    try:
        proc = run(systemctl, *args, timeout=timeout)
    except OSError as exc:
        raise RuntimeError(cannot_run(systemctl, exc)) from None
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise RuntimeError(f"{' '.join(systemctl)} {args[0]} failed "
                           f"(exit {proc.returncode}): {msg[0] if msg else 'no output'}")
    return proc.stdout


def parse_show(text: str) -> list[dict[str, str]]:
    """Blocks of ``systemctl show`` output (``Key=value`` lines, blank line between)."""
    units: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                units.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            cur[key] = value
    if cur:
        units.append(cur)
    return units
