"""A condition error's `path:line:col` points at the character as written in the rule
file, through a TOML string's escapes (issue 40's review: `f200.toml:6:37` pointed at
`0 ` while the `&&` stood at column 39, the column counted in the decoded string).

Ground truth: the column of the offending text as written, found with str.index on the
file's own line (TOML 1.0's string forms: basic, literal, multi-line of each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.core.positions import value_position
from guardian.policy.loader import load_rules
from tests.support.checkout import write
from tests.support.rule_texts import GOOD_RULES

WHEN = 'when = "memcg.dying > 1"'


def _located(tmp_path: Path, when: str) -> tuple[str, str]:
    """The diagnostic for a rule whose `when` line(s) are ``when``, and the file text."""
    text = GOOD_RULES.replace(WHEN, when)
    with pytest.raises(RuleError) as info:
        load_rules([write(tmp_path, "f200.toml", text)])
    [diag] = info.value.diagnostics
    return str(diag).replace(str(tmp_path) + "/", ""), text


def test_the_reviewers_case_points_at_the_ampersands(tmp_path: Path) -> None:
    got, text = _located(tmp_path, r'when = "rate(memcg.dying, \"5m\") > 0 && memcg.live > 1"')
    line6 = text.split("\n")[5]
    assert line6.index("&&") + 1 == 39
    assert got == "f200.toml:6:39: in `when`: `&&` is written `and` in guardian"


@pytest.mark.parametrize(("when", "row", "at"), [
    # a literal string has no escapes: the backslashes are the condition's own text
    ("when = '''\nmemcg.dying > 1 and\n  rate(memcg.live, \"5m\") > 0 && 1\n'''", 8, "&&"),
    ("when = 'memcg.dying > 1 && 1'", 6, "&&"),
    # \\ \t \u00e9-style escapes before the error, one character each when decoded
    (r'when = "memcg.dying > 1\t\u0020\U00000020 && 1"', 6, "&&"),
    # an escaped line break starts a new line of the condition on the same file line
    (r'when = "memcg.dying > 1\n  and memcg.live[5m] > 0"', 6, "["),
    # a multi-line basic string: its escapes and a line-ending backslash
    ('when = """\nmemcg.dying > 1 and \\\n     rate(memcg.live, \\"5m\\") > 0 && 1\n"""', 8,
     "&&"),
    ('when = """memcg.dying > 1 and \\\n\n   memcg.live[5m] > 0"""', 8, "["),
])
def test_the_column_is_the_one_written(tmp_path: Path, when: str, row: int, at: str
                                       ) -> None:
    got, text = _located(tmp_path, when)
    line = text.split("\n")[row - 1]
    assert got.startswith(f"f200.toml:{row}:{line.index(at) + 1}: "), (got, line)


def test_past_the_end_of_a_line_stays_on_it() -> None:
    text = 'when = "a\\tb"\n'
    assert value_position(text, 1, 8, 1, 3) == (1, 13)  # the closing quote
    assert value_position(text, 1, 8, 1, 9) == (1, 13)
