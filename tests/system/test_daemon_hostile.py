"""The daemon under hostile input and fault: rule files that cannot load or block, a rules
directory swapped under the watcher, a full disk under the state or the audit log, a task
limit, an API server that drips. Each test reproduces a failure an adversarial pass found;
each needs the daemon as a process, root or the real kernel (hostile inputs that need
none of these are tested beside their unit under tests/unit/)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from guardian.core.audit import TornLine, read_audit
from tests.support.checkout import write
from tests.support.daemon import RULE, daemon, threads_of
from tests.support.hostile import HOSTILE
from tests.support.kernel import fill, tmpfs
from tests.support.wait import BOUND, wait_until

# The kernel log, memory cgroups, IRQs or PIDs of the whole host: never beside another run.
pytestmark = pytest.mark.host_global


def test_a_reload_that_cannot_load_keeps_the_daemon_and_its_heartbeat(tmp_path: Path) -> None:
    with daemon(tmp_path) as (proc, notify):
        notify.wait_for("READY")
        shutil.copy(HOSTILE / "loader" / "nested-3000-deep.toml",
                    tmp_path / "rules" / "deep.toml")
        notify.wait_for("READY", contains="reload rejected")
        os.mkfifo(tmp_path / "rules" / "fifo.toml")
        notify.wait_for("RELOADING")
        notify.wait_for("READY", contains="reload rejected, 2 error(s)")
        for _ in range(2):
            notify.wait_for("WATCHDOG", timeout=3)  # the loop never blocked on the FIFO
        assert proc.poll() is None


def test_a_replaced_rules_directory_is_still_watched(tmp_path: Path) -> None:
    """Before: a rules directory replaced by a symlink (or recreated) left the watcher on
    the old inode, and later edits were never noticed."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for d in (v1, v2):
        d.mkdir()
        write(d, "one.toml", RULE.format(name="always"))
    link = tmp_path / "rules"
    link.symlink_to(v1)
    with daemon(tmp_path, rules=link) as (proc, notify):
        notify.wait_for("READY", contains="1 rules")
        tmp_link = tmp_path / "rules.new"
        tmp_link.symlink_to(v2)
        tmp_link.replace(link)  # atomic swap, as a ConfigMap update or a deploy does
        notify.wait_for("READY", contains="1 rules")
        write(v2, "two.toml", RULE.format(name="second"))
        notify.wait_for("READY", contains="2 rules", timeout=15)
        assert proc.poll() is None


# -- persistence fails closed, and keeps running --------------------------------------

MARKER = '''version = 1
[[rule]]
name = "acts"
summary = "s"
when = "processes.total > 0"
cooldown = "1h"
limit = {{ runs = 1, within = "1d" }}
  [[rule.action]]
  use = "command"
  argv = ["/bin/sh", "-c", "echo acted >> {marker}"]
'''


def _service(tmp_path: Path, state_dir: Path, audit_dir: Path) -> Any:
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions
    from guardian.service.notify import Notifier

    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    write(rules, "r.toml", MARKER.format(marker=tmp_path / "marker"))
    opts = ServiceOptions(rules=[str(rules)], state_path=state_dir / "state.json",
                          audit_path=audit_dir / "audit.jsonl", metrics_port=None,
                          require_root_owned_rules=False)
    d = Daemon(opts, Config(), notifier=Notifier({}))
    assert d.start() == 0
    return d


def _marks(tmp_path: Path) -> int:
    marker = tmp_path / "marker"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.mark.parametrize("which", ["state", "audit"])
def test_nothing_is_applied_unless_state_and_audit_are_durable(tmp_path: Path,
                                                               which: str) -> None:
    """Before: with the state unwritable guardian acted anyway (three kill-and-restart
    cycles, three runs of a once-a-day action in 8 s); with the audit log unwritable it
    crashed after leaving a torn line. Now: no apply, the loop ticks on, the fault is in
    the status and metrics, and it acts (once) when the disk is back."""
    with tmpfs(tmp_path / "disk") as disk:
        state_dir, audit_dir = (disk, tmp_path) if which == "state" else (tmp_path, disk)
        if which == "audit":  # a torn line that fills its page: the next byte needs a new one
            half = '{"type":"decision","rule":"ear'
            (disk / "audit.jsonl").write_text(half + "x" * (4096 - len(half)))
        d = _service(tmp_path, state_dir, audit_dir)
        try:
            ballast = fill(disk)
            for _ in range(3):
                d.tick()
            assert _marks(tmp_path) == 0
            assert "NOT ACTING, persistence failing" in d.status()
            assert d.metrics.persistence_ok._value.get() == 0
            ballast.unlink()
            d.tick()
            assert _marks(tmp_path) == 1
            assert "NOT ACTING" not in d.status()
            assert d.metrics.persistence_ok._value.get() == 1
            d.tick()
        finally:
            d.shutdown()
        d = _service(tmp_path, state_dir, audit_dir)  # a restart keeps the cooldown
        try:
            d.tick()
        finally:
            d.shutdown()
        assert _marks(tmp_path) == 1
        records = list(read_audit(audit_dir / "audit.jsonl"))
        torn = [r for r in records if isinstance(r, TornLine)]
        assert len(torn) == (1 if which == "audit" else 0)  # only the planted one
        assert torn == [] or torn[0].line_no == 1
        assert sum(1 for r in records if isinstance(r, dict) and r["type"] == "outcome") == 1


EVERY_TICK = '''version = 1
[[rule]]
name = "always"
summary = "s"
when = "processes.total > 0"
cooldown = "0s"
limit = { runs = 1000, within = "1h" }
  [[rule.action]]
  use = "log"
'''


def test_a_task_limit_costs_an_action_never_the_daemon(tmp_path: Path) -> None:
    """Before: under a task limit (systemd's TasksMax) the next apply could not start its
    worker thread and the daemon exited. A real pids cgroup holds it at its thread count."""
    from tests.support.kernel import need_root
    need_root()
    pids = Path("/sys/fs/cgroup/pids")
    if not (pids / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy")
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "r.toml", EVERY_TICK)
    group = pids / f"guardian-test-{os.getpid()}"
    group.mkdir()
    try:
        with daemon(tmp_path, rules=rules) as (proc, notify):
            notify.wait_for("STATUS", contains="last action: log for always: ok")
            (group / "cgroup.procs").write_text(str(proc.pid))
            (group / "pids.max").write_text(str(threads_of(proc.pid)))
            notify.wait_for("STATUS", contains="NOT ACTING (cannot start a thread",
                            timeout=10)
            for _ in range(3):
                notify.wait_for("WATCHDOG", timeout=3)
            assert proc.poll() is None
            (group / "pids.max").write_text("max")
            notify.wait_for("STATUS", contains="last action: log for always: ok", timeout=10)
            (pids / "cgroup.procs").write_text(str(proc.pid))
    finally:
        def removed() -> bool:
            try:
                group.rmdir()
            except OSError:  # busy until the daemon's exit is reaped
                return False
            return True

        wait_until(removed, f"{group} removed", timeout=5)


# -- the loop never blocks without a bound --------------------------------------------

@contextmanager
def dripping_api() -> Iterator[tuple[str, threading.Event]]:
    """An "API server" on loopback that accepts and answers one byte every 2 s, for about
    100 s (its headers never end): every read succeeds, so no per-read timeout ever fires.
    The event is set if it ever sends all of them."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()
    whole = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if stop.wait(2.0):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
            whole.set()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", whole
    finally:
        stop.set()
        server.close()


def test_an_api_that_drips_never_stalls_ready_the_watchdog_or_sigterm(tmp_path: Path) -> None:
    """Before: plan() and the fleet budget ran on the loop; an API server that drips a byte
    every 3 s gave no READY=1 and no watchdog ping for 105 s, and SIGTERM was ignored."""
    from tests.support.kube_standin import kubeconfig

    with dripping_api() as (url, dripped_whole):
        kc = kubeconfig(tmp_path, url)
        rules = tmp_path / "rules"
        rules.mkdir()
        write(rules, "k.toml", f'''version = 1
[[rule]]
name = "k"
summary = "s"
when = "processes.total > 0"
fleet = false
  [[rule.action]]
  use = "kube.cordon"
  kubeconfig = "{kc}"
  node = "node-a"
  timeout = 5
''')
        # all of this while the API is still dripping (about 100 s): a loop stuck on it
        # would give no READY, no ping and no exit until the drip ends
        with daemon(tmp_path, rules=rules) as (proc, notify):
            notify.wait_for("READY", timeout=BOUND)
            # the loop waits on the action (act_deadline), pinging the watchdog meanwhile
            for _ in range(6):
                notify.wait_for("WATCHDOG", timeout=BOUND)
            proc.terminate()
            assert proc.wait(timeout=BOUND) == 0
        assert not dripped_whole.is_set()


