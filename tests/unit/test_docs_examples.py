"""The output the docs show is output the commands print (issue 40): every example in
docs/commands.md's paragraphs on `signals`, `run --once` and `replay`, and the `$values`
in the README's rule, is found in a golden file (tests/data/golden/, the commands' whole
output at a point of tests/data/chain.rec). Before: `cpu.core.sys_pct: cpu1 12.5%, cpu0
3%` (printed as `cpu=1 …`), `kernel_oops 0, null_deref 0` (printed with `lines`) and `55
rules: 45 ok, 9 unknown, 1 firing; nothing to do` (a firing rule and nothing to do)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"
COMMANDS = REPO / "docs" / "commands.md"
# what the paragraphs quote that is no output of theirs (an option, a rule's text, a
# form), or output of a state the goldens do not reach: each with the words of the
# source file that prints it, so it is true to the code all the same
NOT_IN_GOLDENS = {
    "firing: would act now: log, systemd.unit": ("runtime/status.py", "would act now"),
    "acting now": ("runtime/status.py", "acting now"),
    "in cooldown: actions again in 25m": ("runtime/status.py",
                                          "in cooldown: actions again in "),
    "held now:": ("runtime/status.py", "held now: "),
    "=> ok (verified): logged, in 0.5ms": ("cli/common.py", "=> {head}"),
    "guardian: warning: ...": ("core/diagnostics.py", ""),
    "for = \"1h\"": ("", ""), "3m10s": ("", ""),
}
# the paragraphs that show what a command prints, by their first words
SHOWN = ("`signals` lists", "`run --once` takes", "A recording holds")


def _words(text: str) -> str:
    return " ".join(text.split())


def _goldens() -> str:
    return "\n".join(_words(p.read_text()) for p in sorted(GOLDEN.glob("*.txt")))


def _examples() -> list[str]:
    """The code spans of the paragraphs in SHOWN that quote output: with a blank, a
    colon, a digit or an ellipsis (not `--json`, `FIRING`, `run --once` and their like)."""
    paragraphs = COMMANDS.read_text().split("\n\n")
    shown = [p for p in paragraphs if p.startswith(SHOWN)]
    assert len(shown) == len(SHOWN)
    spans = [_words(s) for p in shown for s in re.findall(r"`([^`]+)`", p)]
    return [s for s in spans if re.search(r"[:\d…]| .* ", s) and not s.startswith("-")
            and not s.startswith(("guardian ", "run ", "pip "))]


def test_the_output_the_commands_doc_shows_is_in_the_golden_files() -> None:
    goldens = _goldens()
    examples = _examples()
    assert len(examples) > 10
    wrong = [e for e in examples if e not in goldens and e not in NOT_IN_GOLDENS]
    assert not wrong, f"docs/commands.md shows output no command prints: {wrong}"
    for example, (path, words) in NOT_IN_GOLDENS.items():
        if path:
            assert words in (REPO / "src" / "guardian" / path).read_text(), example


def test_the_readmes_values_are_a_log_lines_values() -> None:
    said = re.search(r'\$values: "([^"]+)"', (REPO / "README.md").read_text())
    assert said is not None
    assert f"dying memcgs: {said.group(1)}" in _goldens()


def test_the_causes_doc_shows_whys_golden_output_whole() -> None:
    """docs/causes.md's `guardian why --at 9m30s` is that command's golden output, byte for
    byte (it once showed raw signals where `why` now says what each condition compared)."""
    doc = (REPO / "docs" / "causes.md").read_text()
    command = "$ guardian why --rules rules/ --recording tests/data/chain.rec --at 9m30s\n"
    shown = doc[doc.index(command) + len(command):]
    assert shown[:shown.index("```")] == (GOLDEN / "why-chain-9m30s.txt").read_text()


def test_the_act_examples_the_actions_doc_gives_parse_and_validate() -> None:
    """Every `guardian act …` docs/actions.md shows is accepted by act's own parser and
    its action's parameters (before: `guardian act gpu.reset --dry-run gpu=0`, which
    argparse refuses, and `--set gpu=0`, an integer the `gpu` string refused)."""
    import shlex

    from guardian.cli import _parser
    from guardian.cli.act import _parse_set
    from guardian.plugin.registry import default_registry

    shown = re.findall(r"`(guardian act [^`<]+)`", (REPO / "docs" / "actions.md").read_text())
    examples = [e for e in shown if "NAME" not in e]
    assert any(e.startswith("guardian act gpu.reset") for e in examples), examples
    actions = default_registry().actions
    for example in examples:
        args = _parser().parse_args(shlex.split(example)[1:])
        actions[args.action].Params.model_validate(_parse_set(args.set))
