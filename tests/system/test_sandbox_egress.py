"""The shipped unit's IP firewall against notify.webhook, where systemd enforces it (issue
38): a real systemd 252 booted in systemd-nspawn with the unified cgroup hierarchy
(``SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1``) and the ``bpf`` system call allowed
(``--system-call-filter=bpf``: nspawn's default filter answers it EPERM, and systemd then
logs "BPF firewalling is not supported" and ignores ``IPAddressDeny=``, as it does on a
hybrid or v1 host). The network is the container's own (``--private-network``): a veth
pair made inside it, the receiver on 10.213.0.1 there; no traffic leaves it.

With the shipped unit, `guardian check` warns and the webhook is dropped (its connection
times out); with the drop-in `guardian check --dropin` prints, installed, it arrives.
guardian runs from this checkout (its sources and the venv's packages bound read-only),
so nothing is built."""

from __future__ import annotations

import contextlib
import subprocess
import sysconfig
from collections.abc import Iterator

import pytest

from guardian.testing.nspawn import Container, booted
from tests.support.checkout import REPO
from tests.support.wait import BOUND, wait_until

pytestmark = pytest.mark.os_integration

ADDRESS = "10.213.0.1"  # inside the container's own network namespace only
PYTHONPATH = "/guardian/src:/guardian/site"
RULE = f'''version = 1
[[rule]]
name = "page-me"
summary = "page a human"
when = "processes.total > 0"
  [[rule.action]]
  use = "notify.webhook"
  url = "http://{ADDRESS}:8080/hook"
  attempts = 1
  timeout = 3
'''
# how guardian is installed here (the checkout, not a venv): nothing of the sandbox
INSTALL = f"""[Service]
ExecStart=
ExecStart=/usr/bin/python3 -m guardian run
Environment=PYTHONPATH={PYTHONPATH} PYTHONDONTWRITEBYTECODE=1
"""
RECEIVER = f"""
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open("/run/received", "ab") as f:
            f.write(body + b"\\n")
        self.send_response(200); self.end_headers()
    def do_GET(self):
        self.send_response(200); self.end_headers()
http.server.HTTPServer(("{ADDRESS}", 8080), H).serve_forever()
"""
PROBE = f"import urllib.request as u; u.urlopen('http://{ADDRESS}:8080/', timeout=3)"


@contextlib.contextmanager
def booted_unified() -> Iterator[Container]:
    """A container as the harness boots it, plus the unified hierarchy, bpf() and a
    private network."""
    site = sysconfig.get_paths()["purelib"]
    with booted(binds=[(str(REPO / "src"), "/guardian/src"), (site, "/guardian/site")],
                name="guardian-egress",
                extra_args=["--private-network", "--system-call-filter=bpf"],
                env={"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}) as c:
        yield c


def network(c: Container) -> None:
    """A veth pair inside the container's namespace, 10.213.0.1 on one end (the host's
    ``ip``, run in that namespace only)."""
    net = ["nsenter", "--target", str(c.leader), "--net", "--"]
    for argv in (["ip", "link", "add", "gv0", "type", "veth", "peer", "name", "gv1"],
                 ["ip", "addr", "add", f"{ADDRESS}/24", "dev", "gv0"],
                 ["ip", "link", "set", "gv0", "up"], ["ip", "link", "set", "gv1", "up"],
                 ["ip", "link", "set", "lo", "up"]):
        subprocess.run(net + argv, check=True, capture_output=True, timeout=10)


def wait_for(c: Container, path: str, text: str, timeout: float) -> str:
    got = [""]

    def holds() -> bool:
        got[0] = c.run("cat", path, check=False).stdout
        return text in got[0]

    with contextlib.suppress(AssertionError):  # said below, with the journal
        wait_until(holds, f"{text!r} in {path}", max(timeout, BOUND), every=0.3)
        return got[0]
    journal = c.run("journalctl", "--no-pager", "-o", "cat", "-u", "guardian.service",
                    check=False).stdout
    raise AssertionError(f"{text!r} never in {path}: {got[0][-2000:]!r}\n{journal[-3000:]}")


def guardian(c: Container, *args: str) -> subprocess.CompletedProcess[str]:
    return c.run("python3", "-m", "guardian", *args, env={"PYTHONPATH": PYTHONPATH},
                 check=False)


def test_the_shipped_units_firewall_drops_the_webhook_until_the_checks_drop_in(
        ) -> None:
    with booted_unified() as c:
        network(c)
        c.run("systemd-run", "--unit=receiver", "-p", "Type=simple", "python3", "-c",
              RECEIVER)
        wait_until(lambda: c.run("python3", "-c", PROBE, check=False).returncode == 0,
                   "the receiver answering", every=0.2)
        # is IPAddressDeny= enforced here at all? (a unit of its own, not guardian's)
        fenced = c.run("systemd-run", "--wait", "--pipe", "-p", "IPAddressDeny=any",
                       "-p", "IPAddressAllow=localhost", "python3", "-c", PROBE,
                       check=False)
        if fenced.returncode == 0:
            pytest.skip("systemd does not enforce IPAddressDeny= in this container (no BPF "
                        "cgroup firewall): " + fenced.stderr[-300:])
        assert "timed out" in fenced.stderr, fenced.stderr  # the SYN is dropped

        # the shipped unit, as is; guardian runs from the checkout
        c.run("mkdir", "-p", "/etc/guardian/rules", "/etc/systemd/system/guardian.service.d")
        c.write("/etc/systemd/system/guardian.service",
                (REPO / "systemd" / "guardian.service").read_text())
        c.write("/etc/systemd/system/guardian.service.d/00-test-install.conf", INSTALL)
        c.write("/etc/guardian/rules/hook.toml", RULE)
        c.write("/etc/guardian/guardian.toml", '[engine]\ninterval = "1s"\n')
        c.run("systemctl", "daemon-reload")

        check = guardian(c, "check")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "rule 'page-me': notify.webhook: connects to the webhook " \
            f"http://{ADDRESS}:8080 ({ADDRESS}), which the unit's IPAddressDeny=any, " \
            "IPAddressAllow=localhost denies" in check.stderr, check.stderr
        dropin = guardian(c, "check", "--dropin")
        assert f"[Service]\nIPAddressAllow={ADDRESS}\n" in dropin.stdout, dropin.stderr

        c.run("systemctl", "start", "guardian.service", timeout=60)
        # the delivery outlives the action's `wait` and goes on in the background; its
        # failure, once its budget is spent, is a line in the journal
        journal = [""]

        def failed() -> bool:
            journal[0] = c.run("journalctl", "--no-pager", "-o", "cat", "-u",
                               "guardian.service", check=False).stdout
            return "unreachable" in journal[0]

        wait_until(failed, "the webhook's failure in the journal", BOUND, every=0.3)
        assert "timed out" in journal[0], journal[0][-3000:]
        audit = c.run("cat", "/var/log/guardian/audit.jsonl").stdout
        assert "notify.webhook" in audit and '"verified":true' not in audit, audit
        assert c.run("test", "-e", "/run/received", check=False).returncode != 0

        # the drop-in check proposed: the next firing's webhook arrives
        c.run("systemctl", "stop", "guardian.service", timeout=30)
        c.run("rm", "-f", "/var/lib/guardian/state.json")  # so the rule fires anew
        c.write("/etc/systemd/system/guardian.service.d/50-actions.conf", dropin.stdout)
        c.run("systemctl", "daemon-reload")
        quiet = guardian(c, "check")
        assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr
        c.run("systemctl", "start", "guardian.service", timeout=60)
        received = wait_for(c, "/run/received", '"rule": "page-me"', 30)
        assert '"kind": "firing"' in received
        c.run("systemctl", "stop", "guardian.service", timeout=30)
