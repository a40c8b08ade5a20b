"""`guardian explain` agrees with `guardian why` and with the engine, over the shipped
recordings (tests/data): what it says is held is what the engine holds, a rule kept
firing by keep_firing_for says so, and every duration is for people ("3m10s", never
"190.022s"). Its human output at one point of the chain is a golden file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.support.checkout import DATA, RULES, write
from tests.support.cli import guardian

CHAIN = DATA / "chain.rec"
INCIDENT = DATA / "incident.rec"
GOLDEN = DATA / "golden" / "explain-dying-memcgs-chain-9m30s.txt"
RAW_SECONDS = re.compile(r"\d+\.\d+s\b")  # 190.022s, 1609.98s: seconds no one reads


def _explain(rule: str, rec: str, at: str, *more: str) -> str:
    out = guardian("explain", rule, "--rules", str(RULES), "--recording", rec, "--at", at,
                   *more)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _why(rec: str, at: str) -> list[dict[str, object]]:
    out = guardian("why", "--rules", str(RULES), "--recording", rec, "--at", at, "--json")
    assert out.returncode == 0, out.stderr
    chain: list[dict[str, object]] = json.loads(out.stdout)["data"]["chain"]
    return chain


def test_explain_at_9m30s_of_the_chain_is_the_golden_file() -> None:
    """Before: "FIRING since 190.022s; actions again in 1609.98s (cooldown); its
    disruptive actions are held while its cause unit-crashloop is firing" above a
    condition that is false, with no word of keep_firing_for."""
    text = _explain("dying-memcgs", str(CHAIN), "9m30s")
    if os.environ.get("GUARDIAN_GOLDEN_UPDATE"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    # `--at 9m30s` is the snapshot replay prints as +9m30s (570.041 s into the recording)
    assert text.startswith("at +9m30s of the recording\n")
    assert "kept firing by keep_firing_for: resolves in 8m unless it holds again" in text
    assert "memcg.dying > 10000 and memcg.dying > 20 * memcg.live  =  false" in text
    assert "FIRING for 3m15s" in text
    assert "held" not in text and not RAW_SECONDS.search(text)


def test_explain_says_run_what_why_shows_run_and_holds_only_what_is_held() -> None:
    """dying-memcgs' remedies say `hold = false`: `why` shows them run while their cause
    fires, and `explain` no longer says they are held. core-system-saturated's irq.move
    is held by its causes, and both say so."""
    for rec in (str(CHAIN), str(INCIDENT)):
        chain = {str(link["rule"]): link for link in _why(rec, "9m30s")}
        did = chain["dying-memcgs"]["did"]
        assert isinstance(did, list) and did
        text = _explain("dying-memcgs", rec, "9m30s")
        assert f"would act: {did[-1]}" in text.splitlines()
        assert "held" not in text
        doc = json.loads(_explain("dying-memcgs", rec, "9m30s", "--json"))["data"]
        assert doc["held_by"] == [] and doc["acted"] == f"would act: {did[-1]}"
    chain = {str(link["rule"]): link for link in _why(str(CHAIN), "9m30s")}
    held = chain["core-system-saturated"]["held"]
    assert isinstance(held, list) and held
    text = _explain("core-system-saturated", str(CHAIN), "9m30s")
    assert "waiting: irq.move held while its cause kernel-time-hog is firing" in text
    doc = json.loads(_explain("core-system-saturated", str(CHAIN), "9m30s", "--json"))
    assert doc["data"]["held_by"] == ["kernel-time-hog", "dying-memcgs"]


def test_explain_past_the_end_of_a_recording_says_which_point_it_shows() -> None:
    text = _explain("dying-memcgs", str(INCIDENT), "9m30s")
    assert text.startswith("at +8m of the recording (its last snapshot: it ends before "
                           "--at 9m30s)\n"), text
    assert "dying-memcgs: FIRING for 1m35s (began 6m35s ago, pending first); in cooldown: "\
        "actions again in 28m25s (cooldown 30m from the last run, 1m35s ago)" in text
    assert not RAW_SECONDS.search(text)


def test_explain_on_this_host_says_what_it_would_do_and_claims_no_past(
        tmp_path: Path) -> None:
    """Live, explain's engine is new: a rule that fires now would act now; nothing is
    said to have acted (before: "FIRING since 0s", and no word of acting)."""
    rules = write(tmp_path, "always.toml", '''version = 1
[[rule]]
name = "always"
summary = "a host always has processes"
when = "processes.total > 0"
  [[rule.action]]
  use = "log"
''')
    # a state directory no service holds: explain says it evaluates alone
    config = write(tmp_path, "g.toml", f'[service]\nstate_file = "{tmp_path}/state.json"\n')
    out = guardian("explain", "always", "--rules", str(rules), "--warmup", "0s", "--config",
                   str(config))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"(no guardian service holds {tmp_path}: evaluated by this "
                               "command alone")
    assert lines[1] == "always: FIRING for 0s; would act now: log"
    assert lines[2] == "condition:" and "acted" not in out.stdout
