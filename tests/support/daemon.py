"""The daemon under test: `guardian run` as a process, with a datagram socket standing in
for systemd's notify socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.checkout import write


class NotifySocket:
    """A datagram socket standing in for systemd's notify socket."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.address = address
        self.messages: list[dict[str, str]] = []

    def read(self, timeout: float) -> dict[str, str] | None:
        self.sock.settimeout(timeout)
        try:
            raw = self.sock.recv(65536).decode()
        except TimeoutError:
            return None
        msg = dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)
        self.messages.append(msg)
        return msg

    def wait_for(self, key: str, timeout: float = 10.0, value: str | None = None,
                 contains: str = "") -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.read(max(deadline - time.monotonic(), 0.01))
            if msg and key in msg and (value is None or msg[key] == value) and \
                    contains in msg.get("STATUS", contains):
                return msg
        raise AssertionError(f"no {key} (status containing {contains!r}) within {timeout}s; "
                             f"got {self.messages[-5:]}")

    def close(self) -> None:
        self.sock.close()
        if not self.address.startswith("@"):
            Path(self.address).unlink(missing_ok=True)


RULE = '''version = 1
[[rule]]
name = "{name}"
summary = "s"
when = "processes.total > 0"
cooldown = "1h"
  [[rule.action]]
  use = "log"
'''


@contextmanager
def daemon(tmp_path: Path, *extra: str, watchdog_usec: int = 1_000_000,
           rules: Path | None = None) -> Iterator[tuple[subprocess.Popen[str], NotifySocket]]:
    rules_dir = rules or tmp_path / "rules"
    if rules is None:
        rules_dir.mkdir(exist_ok=True)
        write(rules_dir, "one.toml", RULE.format(name="always"))
    listener = NotifySocket(str(tmp_path / "notify"))
    env = dict(os.environ, NOTIFY_SOCKET=listener.address,
               WATCHDOG_USEC=str(watchdog_usec))
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--rules", str(rules_dir), "--interval",
         "1s", "--state", str(tmp_path / "state.json"), "--audit",
         str(tmp_path / "audit.jsonl"), "--metrics-port", "0", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, listener
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(timeout=10)
        listener.close()


def threads_of(pid: int) -> int:
    """How many threads process ``pid`` runs (``Threads:`` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def process_state(pid: int) -> str:
    """The state letter of process ``pid`` (``T``: stopped; /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def main_thread_waits(pid: int) -> bool:
    """Whether process ``pid``'s main thread sleeps in a wait (a futex: Event.wait; or a
    poll), as the service's loop does between ticks: its state ``S``, and its kernel wait
    channel, where the kernel shows it."""
    task = Path(f"/proc/{pid}/task/{pid}")
    stat = (task / "stat").read_text()
    if stat[stat.rindex(")") + 2] != "S":
        return False
    wchan = (task / "wchan").read_text().strip()
    return wchan in ("", "0") or any(w in wchan for w in ("futex", "poll", "select"))


def free_port() -> int:
    """A loopback TCP port nothing listens on now, for the daemon's metrics."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
