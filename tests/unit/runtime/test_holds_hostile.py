"""Round 4 of hostile input, holds: a hold source that cannot be read or parsed (a Latin-1
byte, 10 KB of nesting, a file over the cap, a FIFO named ``*.toml``, a symlink out of the
directory) holds every rule until fixed, beside the holds last read from it, and is never
waited on. Before: an undecodable file or a deep nesting raised out of ``read`` (the tick
then dropped every hold: the pause lifted), and a FIFO blocked the loop."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from pathlib import Path

import pytest

from guardian.model.holds import Hold, parse_holds
from guardian.runtime.holds import DropIn, HoldFile

SOON = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).strftime(
    "%Y-%m-%dT%H:%M:%SZ")
GOOD = f'[[hold]]\nrule = "leak"\nuntil = {SOON}\nreason = "rollout"\nauthor = "alice"\n'


def _held(holds: list[Hold]) -> tuple[list[str], bool]:
    """The rules held by name, and whether a broken source holds every rule."""
    return sorted(h.rule for h in holds if not h.broken), any(h.broken for h in holds)


@pytest.mark.usefixtures("default_recursion_limit")  # hypothesis, run before, raises it
def test_an_undecodable_or_oversized_drop_in_holds_every_rule_and_keeps_the_last(
        tmp_path: Path) -> None:
    d = tmp_path / "holds.d"
    d.mkdir()
    f = d / "cm.toml"
    f.write_text(GOOD)
    dropin = DropIn(d)
    assert _held(dropin.read()) == (["leak"], False)
    f.write_bytes(GOOD.replace("rollout", "d\xe9ploiement").encode("latin-1"))
    assert _held(dropin.read()) == (["leak"], True)
    f.write_bytes(b"[[hold]]\n" + b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n")
    held = dropin.read()
    assert _held(held) == (["leak"], True)
    assert any("nested too deeply" in h.reason for h in held)
    f.write_bytes(GOOD.encode() + b"# " + b"x" * (2 << 20) + b"\n")
    assert _held(dropin.read()) == (["leak"], True)
    f.write_text(GOOD.replace("leak", "other"))  # fixed: the new holds alone
    assert _held(dropin.read()) == (["other"], False)


def test_the_pause_file_fails_closed_the_same_way(tmp_path: Path) -> None:
    f = tmp_path / "holds.json"
    good = {"rule": "leak", "until": SOON, "reason": "r", "author": "a"}
    f.write_text(json.dumps([good]))
    pause = HoldFile(f)
    assert _held(pause.read()) == (["leak"], False)
    f.write_bytes(b'[{"rule": "leak", "reason": "\xe9"}]')
    assert _held(pause.read()) == (["leak"], True)
    f.write_text("[" * 10_000 + "]" * 10_000)  # 20 KB of nesting
    assert _held(pause.read()) == (["leak"], True)


def test_a_nested_annotation_is_a_problem_never_an_exception() -> None:
    # the node annotation and the ConfigMap key go through parse_holds too (kube/holds.py)
    for text, fmt in (("[" * 5000 + "]" * 5000, "json"), ('{"a":' * 3000 + "1" +
                      "}" * 3000, "json"), ("a = " + "[" * 5000 + "]" * 5000, "toml"),
                      ('[[hold]]\nlabels = { a = ' + "[" * 3000 + "]" * 3000 + ' }\n',
                       "toml"), (b"\xff\xfe", "json"), ("x" * ((1 << 20) + 1), "json")):
        holds, problems = parse_holds(text, "annotation", fmt)
        assert problems and holds and all(h.broken for h in holds), text[:20]


def test_a_fifo_or_a_symlink_out_of_the_directory_is_refused_never_waited_on(
        tmp_path: Path) -> None:
    d = tmp_path / "holds.d"
    d.mkdir()
    (d / "good.toml").write_text(GOOD)
    os.mkfifo(d / "fifo.toml")
    secret = tmp_path / "elsewhere.toml"
    secret.write_text(GOOD.replace("leak", "planted"))
    (d / "link.toml").symlink_to(secret)
    got: list[list[Hold]] = []
    reader = threading.Thread(target=lambda: got.append(DropIn(d).read()), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # it blocked on the FIFO: let it go, then fail
        fd = os.open(d / "fifo.toml", os.O_WRONLY)
        os.close(fd)
        reader.join(5)
        raise AssertionError("reading holds.d waited on a FIFO")
    [holds] = got
    assert _held(holds) == (["leak"], True)
    reasons = " ".join(h.reason for h in holds if h.broken)
    assert "not a regular file" in reasons and "out of" in reasons
    # a ConfigMap volume's files are symlinks inside the directory: read
    cm = tmp_path / "cm.d"
    (cm / "..2024_01_01").mkdir(parents=True)
    (cm / "..2024_01_01" / "holds.toml").write_text(GOOD)
    (cm / "..data").symlink_to("..2024_01_01")
    (cm / "holds.toml").symlink_to("..data/holds.toml")
    assert _held(DropIn(cm).read()) == (["leak"], False)
