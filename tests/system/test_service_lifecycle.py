"""The service process's life cycle where a container runtime puts it: signals that land on
any thread (with host PID, `podman stop`'s SIGTERM is process-directed: the kernel hands
it to any thread not blocking it, signal(7)), one instance per state directory, and
start-up failures that say what is wrong in one line (no traceback) and stop at once."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from guardian.runtime.config import Config
from guardian.service.daemon import Daemon, ServiceOptions
from tests.support.checkout import write
from tests.support.daemon import RULE, NotifySocket, daemon, main_thread_waits
from tests.support.wait import BOUND, wait_until

SYS_TGKILL = 234  # x86_64 (arch/x86/entry/syscalls/syscall_64.tbl)


def _to_a_worker_thread(pid: int, sig: int) -> None:
    """Send ``sig`` to one thread of ``pid`` that is not its main thread: where a
    process-directed signal may land (tgkill(2) picks it deterministically)."""
    if os.uname().machine != "x86_64":
        pytest.skip("tgkill's number is x86_64's here")
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert tids, "the daemon runs no worker thread"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(SYS_TGKILL, pid, tids[0], sig) == 0, os.strerror(ctypes.get_errno())


# (watchdog_usec=0: no systemd watchdog, as in a container; its pings would wake the loop
# every half period and hide the wait)


def _exit_code(proc: subprocess.Popen[str]) -> int | None:
    """How the daemon ended, or None while it runs on: its next tick is an hour away, so a
    daemon that ends within BOUND (30 s) did not wait for it."""
    try:
        return proc.wait(timeout=BOUND)
    except subprocess.TimeoutExpired:
        return None


def _into_the_wait(proc: subprocess.Popen[str], notify: NotifySocket) -> None:
    """Until the first tick is done and the main loop sleeps towards the next."""
    notify.wait_for("READY")
    wait_until(lambda: main_thread_waits(proc.pid), "the main loop waiting for its next tick")


def test_sigterm_on_a_worker_thread_ends_it_before_its_next_tick(tmp_path: Path) -> None:
    """Before: the main loop slept in Event.wait until its next tick (45 s), and `podman
    stop` SIGKILLed it at the 30 s grace period (exit 137)."""
    with daemon(tmp_path, "--interval", "1h", watchdog_usec=0) as (proc, notify):
        _into_the_wait(proc, notify)
        _to_a_worker_thread(proc.pid, signal.SIGTERM)
        assert _exit_code(proc) == 0


def test_sigterm_to_the_process_ends_it_before_its_next_tick(tmp_path: Path) -> None:
    with daemon(tmp_path, "--interval", "1h", watchdog_usec=0) as (proc, notify):
        _into_the_wait(proc, notify)
        proc.send_signal(signal.SIGTERM)
        assert _exit_code(proc) == 0


def test_sighup_on_a_worker_thread_reloads_before_the_next_tick(tmp_path: Path) -> None:
    """Before: the reload waited for the next tick, as SIGTERM did (an hour away here)."""
    with daemon(tmp_path, "--interval", "1h", watchdog_usec=0) as (proc, notify):
        _into_the_wait(proc, notify)
        _to_a_worker_thread(proc.pid, signal.SIGHUP)
        notify.wait_for("RELOADING", timeout=BOUND)


def test_a_second_instance_on_the_same_state_directory_refuses(tmp_path: Path) -> None:
    """Before: the package's unit beside the DaemonSet (one /var/lib/guardian) both ran
    and both acted on every rule."""
    with daemon(tmp_path, "--interval", "45s") as (first, notify):
        notify.wait_for("READY")
        second = subprocess.run(
            [sys.executable, "-m", "guardian", "run", "--rules", str(tmp_path / "rules"),
             "--state", str(tmp_path / "state.json"), "--audit",
             str(tmp_path / "audit2.jsonl"), "--metrics-port", "0"],
            capture_output=True, text=True, timeout=60)
        assert second.returncode == 78  # EX_CONFIG: the unit does not restart into it
        assert f"another guardian (pid {first.pid}) already uses the state directory " \
               f"{tmp_path}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules"
    if not rules.exists():
        write(rules, "one.toml", RULE.format(name="always"))
    return subprocess.run([sys.executable, "-m", "guardian", "run", "--rules", str(rules),
                           "--interval", "1s", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def _one_line_error(err: str, words: str) -> None:
    assert "Traceback" not in err, err
    [line] = [ln for ln in err.splitlines() if "ERROR" in ln]
    assert words in line, err


def test_an_unusable_state_directory_is_one_line(tmp_path: Path) -> None:
    """Before: a traceback."""
    write(tmp_path, "file", "")
    out = _run(tmp_path, "--state", str(tmp_path / "file" / "state.json"), "--audit",
               str(tmp_path / "audit.jsonl"), "--metrics-port", "0")
    assert out.returncode == 78
    _one_line_error(out.stderr, f"cannot use the state directory {tmp_path / 'file'}")


def test_an_unusable_audit_log_is_one_line(tmp_path: Path) -> None:
    """Before: a traceback."""
    write(tmp_path, "file", "")
    out = _run(tmp_path, "--state", str(tmp_path / "state.json"), "--audit",
               str(tmp_path / "file" / "audit.jsonl"), "--metrics-port", "0")
    assert out.returncode == 73  # EX_CANTCREAT
    _one_line_error(out.stderr, f"cannot open the audit log {tmp_path / 'file'}")


def test_fleet_without_credentials_is_one_line(tmp_path: Path) -> None:
    """Before: lightkube's traceback."""
    pytest.importorskip("lightkube")
    config = write(tmp_path, "guardian.toml", '[fleet]\nnamespace = "guardian"\n')
    config.chmod(0o644)
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    out = _run(tmp_path, "--config", str(config), "--state", str(tmp_path / "state.json"),
               "--audit", str(tmp_path / "audit.jsonl"), "--metrics-port", "0", env=env)
    assert out.returncode == 78
    _one_line_error(out.stderr, "[fleet] needs the Kubernetes API, and no credentials")


def test_a_taken_metrics_port_fails_start_up(tmp_path: Path) -> None:
    """Before: it ran on without /healthz, so a liveness probe killed it later and the
    cause was one log line among many."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _run(tmp_path, "--state", str(tmp_path / "state.json"), "--audit",
                   str(tmp_path / "audit.jsonl"), "--metrics-port", str(port))
    assert out.returncode == 75  # EX_TEMPFAIL: restarted, it may find the port free
    _one_line_error(out.stderr, f"metrics off (127.0.0.1:{port}: Address already in use)")


def test_health_asks_where_the_service_listens(tmp_path: Path) -> None:
    """Before: `guardian health` (the exec probe) asked 127.0.0.1 while the DaemonSet's
    service listened on the node's address. Both read GUARDIAN_METRICS_ADDRESS now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GUARDIAN_METRICS_ADDRESS="127.0.0.2",
               GUARDIAN_METRICS_PORT=str(port))
    config = write(tmp_path, "g.toml", "")
    rules = tmp_path / "rules"
    write(rules, "one.toml", RULE.format(name="always"))
    # the service told where by its arguments, as the DaemonSet's args do; the probe by
    # the environment the DaemonSet sets beside them
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "run", "--rules", str(rules), "--state",
         str(tmp_path / "state.json"), "--audit", str(tmp_path / "audit.jsonl"),
         "--metrics-address", "127.0.0.2", "--metrics-port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def healthz() -> bool:
            try:
                urllib.request.urlopen(f"http://127.0.0.2:{port}/healthz", timeout=1)
                return True
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                return False

        wait_until(healthz, "/healthz on 127.0.0.2", every=0.2)
        out = subprocess.run([sys.executable, "-m", "guardian", "health", "--config",
                              str(config)], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert f"127.0.0.2:{port}" not in out.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_source_the_rules_read_and_cannot_open_is_degraded(tmp_path: Path) -> None:
    """Before: /healthz said ok and no metric named the source while every kernel-log rule
    stayed unknown (the unprivileged pod cannot open /dev/kmsg)."""
    from prometheus_client import generate_latest

    rules = write(tmp_path / "rules", "k.toml", '''version = 1
[[rule]]
name = "oops"
summary = "s"
when = 'increase(kmsg.matches{pattern="kernel_oops"}, "1h") > 0'
  [[rule.action]]
  use = "log"
''').parent
    root = tmp_path / "host"  # a host root without /dev/kmsg
    root.mkdir()
    d = Daemon(ServiceOptions(rules=[str(rules)], interval=1.0, metrics_port=None,
                              require_root_owned_rules=False, root=root), Config())
    assert d.start() == 0
    try:
        d.tick()
        ok, text = d.health()
        assert ok and text.startswith("degraded: the last tick completed"), text
        assert "source kmsg unavailable: cannot open" in text, text
        metrics = generate_latest(d.metrics.registry).decode()
        assert 'guardian_source_up{source="kmsg"} 0.0' in metrics
    finally:
        d.shutdown()
