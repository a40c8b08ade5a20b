"""A page whose parse would cost more than it may is refused before prometheus_client's
parser sees it (issue 39, round 4): before, one sample with a 4 MiB label set cost ~70 s
of CPU on the worker, every round."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import parser as prom_parser

from guardian.sources.exposition import parse
from tests.support.exposition import exposition_source

GOOD = "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\nDCGM_FI_DEV_XID_ERRORS{gpu=\"0\"} 79\n"
SIXTY = ",".join(f'l{j}="v"' for j in range(60))
LABEL_BOMB = "x{" + ",".join(f'l{i}="v"' for i in range(400_000)) + "} 1\n"
BOMBS = {
    "labels": GOOD + LABEL_BOMB,
    # within max_line_bytes, over max_labels
    "labels-short": GOOD + "x{" + ",".join(f'l{i}=""' for i in range(1000)) + "} 1\n",
    "escapes": GOOD + 'x{a="' + '\\"' * 5000 + '"} 1\n',
    "line": GOOD + 'x{a="' + "v" * 100_000 + '"} 1\n',
    # many lines each under the caps, over the labels allowed in all
    "total": GOOD + "".join(f"m{i}{{{SIXTY}}} 1\n" for i in range(4000)),
}
WHY = {"labels": "longer than max_line_bytes", "labels-short": "labels (max_labels 64)",
       "escapes": "backslash escapes", "line": "longer than max_line_bytes",
       "total": "labels in all (max_labels_total)"}


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text handed to prometheus_client's parser."""
    seen: list[str] = []
    real = prom_parser.text_string_to_metric_families

    def spy(text: str):  # type: ignore[no-untyped-def]
        seen.append(text)
        return real(text)

    monkeypatch.setattr(prom_parser, "text_string_to_metric_families", spy)
    return seen


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_page_that_would_cost_too_much_is_refused_unparsed(
        kind: str, parsed: list[str]) -> None:
    with pytest.raises(ValueError, match=re.escape(WHY[kind])) as why:
        parse(BOMBS[kind], "dcgm", 2_000, ["*"])
    assert "line 3" in str(why.value) or kind == "total"
    assert parsed == []  # the parser never saw the page
    # an ordinary page is parsed as before
    fam, dropped = parse(GOOD, "dcgm", 2_000, ["*"])
    assert list(fam.values()) == [79.0] and dropped == 0


def test_a_textfile_with_a_label_bomb_is_no_value_with_why(
        tmp_path: Path, parsed: list[str]) -> None:
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "dcgm.prom").write_text(BOMBS["labels-short"])
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    src.refresh()
    out = src.collect(0.0)
    assert out["prom.sample"] is None
    assert src.faults() == ["file:dcgm.prom: ValueError: line 3: a sample with 1000 "
                            "labels (max_labels 64)"]
    assert parsed == []
    src.close()


def test_samples_past_twice_max_samples_are_never_parsed(parsed: list[str]) -> None:
    """One family of 100,000 samples: only the first 2 x max_samples reach the parser."""
    text = "# TYPE x gauge\n" + "".join(f'x{{i="{i}"}} 1\n' for i in range(100_000))
    fam, dropped = parse(text, "t", 100_000, ["*"], max_samples=1_000)
    assert len(fam) == 1_000 and dropped == 99_000
    assert parsed and parsed[0].count("\n") == 2_001
