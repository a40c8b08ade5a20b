"""What the service tells its operator about what it sees: blind rules in STATUS=,
/healthz, `guardian health` and the metrics; `guardian why` on the node answers from what
the service saw, naming the member that fired and what guardian did, and every action is
one line in its journal.

Before: the service's STATUS= said "55 rules; 0 firing" and /healthz "ok" while 9 rules
had no value; `guardian why` on a node where the service had stopped a unit answered
"Nothing is wrong", from a fresh process that counted restarts from zero.

A rule blind only by the operator's choice (its source disabled, or with nothing
configured: the DCGM rules on a node with no exporter) is named with that cause, and
leaves /healthz "ok": every node of a default install was "degraded" (and `guardian
health` exited 3) forever, for sources it was never asked to read, so the word said
nothing about a source that broke. A source that cannot work or fails still makes it
"degraded"."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from guardian.runtime.config import Config
from guardian.service.daemon import Daemon, ServiceOptions
from guardian.sources.exposition import ExpositionConfig
from tests.support.checkout import write
from tests.support.daemon import daemon, free_port

BLIND_RULES = '''version = 1
[[rule]]
name = "dying"
summary = "s"
when = "memcg.dying > 100000"

[[rule]]
name = "zombies"
summary = "s"
when = "processes.zombies > 100000"
'''

# a DCGM rule: blind where no exporter is configured
GPU_RULES = BLIND_RULES + '''
[[rule]]
name = "gpu"
summary = "s"
when = 'prom.sample{metric="DCGM_FI_DEV_XID_ERRORS"} == 79'
'''

# a rule over a family that fires at once: its members are the evidence, its action runs
FIRING_RULES = '''version = 1
[[rule]]
name = "busy-cores"
summary = "some core did work"
when = "cpu.core.user_pct >= 0"
cooldown = "1h"
  [[rule.action]]
  use = "log"
  message = "cores busy"
'''


def _daemon(tmp_path: Path, rules_text: str, config: Config) -> Daemon:
    rules = write(tmp_path / "rules", "r.toml", rules_text).parent
    return Daemon(ServiceOptions(rules=[str(rules)], interval=1.0, metrics_port=None,
                                 state_path=tmp_path / "state.json",
                                 require_root_owned_rules=False), config)


def test_a_blind_rule_is_named_in_status_health_and_metrics(tmp_path: Path) -> None:
    # the cgroups source left out by the config: memcg.dying has no value anywhere; the
    # exposition source has nothing configured: prom.sample has none either
    d = _daemon(tmp_path, GPU_RULES, Config(disabled_sources=["cgroups"]))
    assert d.start() == 0
    try:
        d.tick()
        assert "2 blind (dying, gpu): cgroups disabled, exposition not configured" in \
            d.status(), d.status()
        ok, text = d.health()
        # blind by the operator's choice only: alive and "ok", the rules named with why
        assert ok and text.startswith("ok: "), text
        assert "2 blind (dying, gpu): cgroups disabled, exposition not configured" in text
        assert "source cgroups disabled in the config ([sources] disabled)" in text
        assert ("source exposition not configured: no endpoints or textfile directories "
                "in [sources.exposition]") in text
        assert d.metrics.rules_blind._value.get() == 2
        assert d.metrics.rule_blind.causes == {"dying": "disabled", "gpu": "unconfigured"}
        seen = json.loads((tmp_path / "seen.json").read_text())
        assert {b["rule"]: b["cause"] for b in seen["blind"]} == {
            "dying": "disabled", "gpu": "unconfigured"}
        assert [b["reasons"] for b in seen["blind"] if b["rule"] == "dying"] == [
            ["source cgroups disabled in the config ([sources] disabled)"]]
    finally:
        d.shutdown()


def test_a_source_configured_and_failing_makes_health_degraded(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-textfile-directory")
    d = _daemon(tmp_path, GPU_RULES, Config(disabled_sources=["cgroups"], sources={
        "exposition": ExpositionConfig(textfile_directories=[missing])}))
    assert d.start() == 0
    try:
        d.tick()
        ok, text = d.health()
        assert ok and text.startswith("degraded: "), text
        assert "2 blind (gpu, dying)" in text, text
        # failing once the worker's first round met the missing directory; before it,
        # the source runs and gives no such value yet: either way not a choice
        assert d.metrics.rule_blind.causes["gpu"] in ("failing", "absent")
        assert d.metrics.rule_blind.causes["dying"] == "disabled"
    finally:
        d.shutdown()


def test_guardian_health_exits_3_while_degraded_and_0_when_asked_if_alive(
        tmp_path: Path) -> None:
    port = free_port()
    rules = write(tmp_path / "rules", "r.toml", GPU_RULES).parent
    # a textfile directory that is not there: the exposition source fails (not a choice)
    config = write(tmp_path, "g.toml", '[sources]\ndisabled = ["cgroups"]\n'
                   '[sources.exposition]\ntextfile_directories = '
                   f'["{tmp_path / "no-such-directory"}"]\n')
    health = [sys.executable, "-m", "guardian", "health", "--config", str(config), "--port",
              str(port), "--timeout", "5s"]
    with daemon(tmp_path, "--metrics-port", str(port), "--config", str(config),
                rules=rules) as (_, notify):
        notify.wait_for("STATUS", contains="last action")  # the first tick is done
        plain = subprocess.run(health, capture_output=True, text=True, timeout=60)
        assert plain.returncode == 3, (plain.stdout, plain.stderr)
        assert plain.stdout.startswith("degraded: ") and "2 blind (gpu, dying)" in \
            plain.stdout, plain.stdout
        live = subprocess.run([*health, "--live"], capture_output=True, text=True, timeout=60)
        assert live.returncode == 0, (live.stdout, live.stderr)
        as_json = subprocess.run([*health, "--json"], capture_output=True, text=True,
                                 timeout=60)
        assert json.loads(as_json.stdout)["data"]["state"] == "degraded"


def test_why_on_the_node_answers_from_what_the_service_saw(tmp_path: Path) -> None:
    rules = write(tmp_path / "rules", "r.toml", FIRING_RULES).parent
    state = tmp_path / "state.json"
    with daemon(tmp_path, rules=rules) as (proc, notify):
        notify.wait_for("STATUS", contains="last action: log for busy-cores: ok")
        notify.wait_for("STATUS", contains="last action")  # a tick after: seen.json has it
        out = subprocess.run([sys.executable, "-m", "guardian", "why", "--rules", str(rules),
                              "--state", str(state)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert text.startswith(f"As the guardian service (pid {proc.pid}) sees it "), text
        assert "busy-cores [FIRING" in text, text
        assert "evidence: cpu.core.user_pct: cpu=" in text, text  # members, as text
        assert "acted: " in text and "log ok: " in text, text
        assert "Its last actions:" in text and "(rule busy-cores)" in text, text
        as_json = json.loads(subprocess.run(
            [sys.executable, "-m", "guardian", "why", "--rules", str(rules), "--state",
             str(state), "--json"], capture_output=True, text=True, timeout=60).stdout)
        assert as_json["data"]["service_pid"] == proc.pid
        # explain, live, says what the service saw of the rule beside its own evaluation
        config = write(tmp_path, "g.toml", f'[service]\nstate_file = "{state}"\n')
        explained = subprocess.run(
            [sys.executable, "-m", "guardian", "explain", "busy-cores", "--rules", str(rules),
             "--config", str(config), "--warmup", "0.2s"],
            capture_output=True, text=True, timeout=60).stdout
        assert explained.startswith(f"As the guardian service (pid {proc.pid}) sees it "), \
            explained
        assert "  the service: FIRING, began " in explained, explained
        assert "  the service acted: " in explained and " log ok: " in explained, explained
    # every action is one line in the service's journal (its stderr under systemd)
    journal = proc.stderr.read() if proc.stderr else ""
    assert journal.count("rule busy-cores: log ok: ") == 1, journal
    # with the service gone, why says it evaluates alone, and what that misses
    alone = subprocess.run([sys.executable, "-m", "guardian", "why", "--rules", str(rules),
                            "--state", str(state), "--warmup", "0.2s"],
                           capture_output=True, text=True, timeout=60)
    assert alone.stdout.startswith("(no guardian service holds "), alone.stdout


def test_healthz_body_names_the_blind_rules(tmp_path: Path) -> None:
    port = free_port()
    rules = write(tmp_path / "rules", "r.toml", BLIND_RULES).parent
    config = write(tmp_path, "g.toml", '[sources]\ndisabled = ["cgroups"]\n')
    with daemon(tmp_path, "--metrics-port", str(port), "--config", str(config),
                rules=rules) as (_, notify):
        # the first status (READY's) says it already (before: only from the second tick)
        ready = notify.wait_for("READY")
        assert "1 blind (dying)" in ready["STATUS"], ready
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
        # blind by the operator's choice (the source disabled): named, with why, and "ok"
        assert body.decode().startswith("ok: ") and "1 blind (dying): cgroups disabled" in \
            body.decode(), body
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                         timeout=5).read().decode()
        assert "guardian_rules_blind 1.0" in metrics
        assert 'guardian_rule_state{rule="dying",state="unknown"} 1.0' in metrics
        assert 'guardian_rule_blind{cause="disabled",rule="dying"} 1.0' in metrics
