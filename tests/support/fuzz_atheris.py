"""Coverage-guided fuzz target (atheris/libFuzzer) for everything that parses untrusted
text: rule files, rule-test files, conditions, rule-test series, and the /proc, kmsg and
systemctl parsers.

    python tests/support/fuzz_atheris.py -max_total_time=60     # a longer hunt by hand

Any exception other than the clean errors below is a crash; libFuzzer writes the input
that caused it to ``crash-*`` in the working directory.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from guardian.core.diagnostics import RuleError
    from guardian.core.snapshot import SignalSpec
    from guardian.hostio.kernelstats import (
        parse_net_dev,
        parse_pressure,
        parse_proc_stat_cpus,
        parse_softirqs,
        parse_softnet_stat,
    )
    from guardian.hostio.kmsg import parse_record
    from guardian.hostio.procfs import parse_proc_stat
    from guardian.hostio.systemctl import parse_show
    from guardian.policy.expr import ExprError, compile_condition
    from guardian.policy.loader import load_text
    from guardian.policy.ruletest import parse_series, run_test_file

CAT = {s.name: s for s in (SignalSpec("a.x", ""), SignalSpec("c.core", "", labels=("cpu",)))}
TEST_DIR = tempfile.mkdtemp(prefix="guardian-fuzz-")
Path(TEST_DIR, "r.toml").write_text('version = 1\n[[rule]]\nname = "hot"\nsummary = "s"\n'
                                    'when = "memcg.dying > 5"\n')


def rule_test_file(text: str) -> None:
    """A rule-test file's text through the whole loader: any problem is in the result."""
    f = Path(TEST_DIR, "t.test.toml")
    f.write_text(text)
    res = run_test_file(f)
    if any(d.line < 1 or d.col < 1 for d in res.errors):
        raise AssertionError(f"an error at no position: {res.errors}")

CLEAN = (ValueError, LookupError, UnicodeError, ExprError, RuleError, struct.error)
TEXT_TARGETS = [
    load_text,
    rule_test_file,
    lambda t: compile_condition(t, CAT),
    parse_series, parse_proc_stat, parse_proc_stat_cpus, parse_softirqs, parse_softnet_stat,
    parse_net_dev, parse_pressure, parse_show,
]


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, len(TEXT_TARGETS))
    if which == len(TEXT_TARGETS):
        raw = fdp.ConsumeBytes(2000)
        try:  # noqa: SIM105 (cheaper than contextlib.suppress in the fuzz loop)
            parse_record(raw)
        except CLEAN:
            pass
        return
    text = fdp.ConsumeUnicodeNoSurrogates(2000)
    try:  # noqa: SIM105
        TEXT_TARGETS[which](text)
    except CLEAN:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
