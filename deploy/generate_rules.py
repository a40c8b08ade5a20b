#!/usr/bin/env python3
"""Write the DaemonSet's rules from the shipped ones, so that no rule is left out:

- deploy/kubernetes/rules.yaml: the ConfigMap guardian-rules, one key per shipped rule
  file (rules/*.toml, not the *.test.toml), each file verbatim but for what
  deploy/kubernetes/rules-kubernetes.toml adds to its rules (node-problem-detector's
  conditions and events, a fleet slot);
- deploy/kubernetes-unprivileged/rules-patch.yaml: the unprivileged overlay's JSON patch
  of that ConfigMap: the files with an action only a privileged container can take
  (memcg.release and irq.move write /proc/sys and /proc/irq), without those actions.

Run it after changing rules/ or rules-kubernetes.toml (`--check` only says whether the
files are current; tests/unit/test_deploy_rules.py runs it so). The Python standard
library is enough (3.11, or 3.10 with tomli)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the oldest Python
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"
ADDITIONS = REPO / "deploy" / "kubernetes" / "rules-kubernetes.toml"
CONFIGMAP = REPO / "deploy" / "kubernetes" / "rules.yaml"
PATCH = REPO / "deploy" / "kubernetes-unprivileged" / "rules-patch.yaml"
COMMAND = "python3 deploy/generate_rules.py"
NAME, NAMESPACE = "guardian-rules", "guardian"
PRIVILEGED_ACTIONS = ("memcg.release", "irq.move")

RULE_HEADER = re.compile(r"^\[\[rule\]\]\s*(#.*)?$")
ACTION_HEADER = re.compile(r"^\s*\[\[rule\.action\]\]\s*(#.*)?$")
ANY_HEADER = re.compile(r"^\s*\[")
NAME_LINE = re.compile(r'^\s*name\s*=\s*"([^"]+)"\s*(#.*)?$')


class GenerateError(Exception):
    pass


def shipped_files() -> list[Path]:
    return sorted(p for p in RULES.glob("*.toml") if not p.name.endswith(".test.toml"))


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """Each top-level ``[[rule]]`` block as (first line, end), up to the next one."""
    starts = [i for i, line in enumerate(lines) if RULE_HEADER.match(line)]
    return list(zip(starts, [*starts[1:], len(lines)], strict=True))


def _content_end(lines: list[str], start: int, end: int) -> int:
    """Past the block's last line that is neither blank nor a comment: comments and blank
    lines after it introduce what follows."""
    while end > start and (not lines[end - 1].strip() or lines[end - 1].lstrip()
                           .startswith("#")):
        end -= 1
    return end


def _name_of(lines: list[str], start: int, end: int) -> tuple[str, int]:
    for i in range(start, end):
        if ANY_HEADER.match(lines[i]) and i != start:
            break
        if m := NAME_LINE.match(lines[i]):
            return m.group(1), i
    raise GenerateError(f"the [[rule]] at line {start + 1} has no name = \"...\" line")


def _additions() -> dict[str, tuple[list[str], list[str]]]:
    """rules-kubernetes.toml: rule name -> (its key lines, its action lines)."""
    lines = ADDITIONS.read_text().splitlines(keepends=True)
    out: dict[str, tuple[list[str], list[str]]] = {}
    for start, end in _blocks(lines):
        end = _content_end(lines, start, end)
        name, at = _name_of(lines, start, end)
        first_action = next((i for i in range(at, end) if ACTION_HEADER.match(lines[i])), end)
        keys = [line for line in lines[at + 1:first_action] if line.strip()]
        if name in out:
            raise GenerateError(f"{ADDITIONS.name}: {name!r} twice")
        out[name] = (keys, lines[first_action:end])
    return out


def with_additions(text: str, additions: dict[str, tuple[list[str], list[str]]]
                   ) -> tuple[str, set[str]]:
    """``text`` with its rules' additions in place, and the names it added to."""
    lines = text.splitlines(keepends=True)
    done: set[str] = set()
    for start, end in reversed(_blocks(lines)):
        name, at = _name_of(lines, start, end)
        if name not in additions:
            continue
        keys, actions = additions[name]
        content_end = _content_end(lines, start, end)
        if not lines[content_end - 1].endswith("\n"):
            lines[content_end - 1] += "\n"
        lines[content_end:content_end] = ["\n", *actions] if actions else []
        lines[at + 1:at + 1] = keys
        done.add(name)
    return "".join(lines), done


def without_actions(text: str, uses: tuple[str, ...]) -> str:
    """``text`` without the ``[[rule.action]]`` tables whose ``use`` is in ``uses``, nor
    the comment lines just above each."""
    lines = text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if ANY_HEADER.match(line)]
    for i, start in reversed(list(enumerate(headers))):
        if not ACTION_HEADER.match(lines[start]):
            continue
        end = _content_end(lines, start, headers[i + 1] if i + 1 < len(headers)
                           else len(lines))
        if not any(re.match(rf'^\s*use\s*=\s*"{re.escape(u)}"', line)
                   for line in lines[start:end] for u in uses):
            continue
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        while start > 0 and not lines[start - 1].strip():
            start -= 1
        del lines[start:end]
    return "".join(lines)


def _check(name: str, before: str, after: str, expect: dict[str, Any]) -> None:
    """What the text edits made parses to ``expect``: nothing lost, moved or misplaced."""
    try:
        got = tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:
        raise GenerateError(f"{name}: the generated text is not TOML: {exc}") from exc
    if got != expect:
        raise GenerateError(f"{name}: the generated text does not read as intended "
                            f"(from {tomllib.loads(before)!r})")


def kubernetes_rules() -> dict[str, str]:
    """File name -> the DaemonSet's text of it."""
    additions = _additions()
    wanted = tomllib.loads(ADDITIONS.read_text())["rule"]
    out: dict[str, str] = {}
    added: set[str] = set()
    for path in shipped_files():
        text = path.read_text()
        new, done = with_additions(text, additions)
        expect = tomllib.loads(text)
        for rule in expect.get("rule", []):
            for add in wanted:
                if add["name"] == rule["name"]:
                    rule.update({k: v for k, v in add.items() if k not in ("name", "action")})
                    rule["action"] = [*rule.get("action", []), *add.get("action", [])]
        _check(path.name, text, new, expect)
        added |= done
        out[path.name] = new
    if missing := sorted(set(additions) - added):
        raise GenerateError(f"{ADDITIONS.name} adds to rules no shipped file has: "
                            f"{', '.join(missing)}")
    return out


def unprivileged_rules(rules: dict[str, str]) -> dict[str, str]:
    """The files of ``rules`` that use a privileged action, without those actions."""
    out: dict[str, str] = {}
    for name, text in rules.items():
        if not any(f'"{u}"' in text for u in PRIVILEGED_ACTIONS):
            continue
        note = (f"# deploy/kubernetes-unprivileged: without its "
                f"{' and '.join(PRIVILEGED_ACTIONS)} actions\n")
        new = without_actions(text, PRIVILEGED_ACTIONS)
        first, _, rest = new.partition("\n")  # after an editor's #:schema line, if any
        new = f"{first}\n{note}{rest}" if first.startswith("#:schema") else note + new
        expect = tomllib.loads(text)
        for rule in expect.get("rule", []):
            rule["action"] = [a for a in rule.get("action", [])
                              if a.get("use") not in PRIVILEGED_ACTIONS]
        _check(name, text, new, expect)
        out[name] = new
    return out


def _literal(text: str, indent: str) -> str:
    """``text`` as a YAML literal block scalar (its indicator and lines)."""
    if text[:1] in (" ", "\t"):
        raise GenerateError("a file starting with white space needs an indentation "
                            "indicator, which this writer does not write")
    chomp = "+" if text.endswith("\n\n") else "" if text.endswith("\n") else "-"
    body = "".join(indent + line if line.strip("\n") else line
                   for line in text.splitlines(keepends=True))
    return f"|{chomp}\n{body}" + ("" if body.endswith("\n") else "\n")


HEADER = (f"# Generated by `{COMMAND}` from rules/*.toml and\n"
          "# deploy/kubernetes/rules-kubernetes.toml: edit those and run it again.\n")


def configmap_yaml(rules: dict[str, str]) -> str:
    out = [HEADER,
           "# Every shipped rule, as the DaemonSet reads them from /etc/guardian/rules.\n",
           "apiVersion: v1\nkind: ConfigMap\nmetadata:\n",
           f"  name: {NAME}\n  namespace: {NAMESPACE}\ndata:\n"]
    out += [f"  {name}: {_literal(text, '    ')}" for name, text in sorted(rules.items())]
    return "".join(out)


def patch_yaml(rules: dict[str, str]) -> str:
    out = [HEADER,
           f"# The ConfigMap {NAME}'s files that use {' or '.join(PRIVILEGED_ACTIONS)}, "
           "without\n# those actions: an unprivileged container cannot write /proc/sys or "
           "/proc/irq.\n"]
    for name, text in sorted(rules.items()):
        out.append(f"- op: replace\n  path: /data/{name.replace('~', '~0')}\n"
                   f"  value: {_literal(text, '    ')}")
    return "".join(out)


def outputs() -> dict[Path, str]:
    rules = kubernetes_rules()
    return {CONFIGMAP: configmap_yaml(rules), PATCH: patch_yaml(unprivileged_rules(rules))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and show the difference if a file is "
                             "not current")
    args = parser.parse_args(argv)
    try:
        files = outputs()
    except GenerateError as exc:
        print(f"generate_rules: {exc}", file=sys.stderr)
        return 2
    stale = 0
    for path, text in files.items():
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        rel = path.relative_to(REPO)
        if args.check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True),
                f"{rel} (as it is)", f"{rel} (as `{COMMAND}` writes it)"))
        else:
            path.write_text(text)
            print(f"wrote {rel}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
