"""The editor schemas (`guardian schema`, shipped in schemas/) against the shipped TOML
files, with the validators editors and CI use: check-jsonschema (Python) and taplo (npm
@taplo/cli, which .ci/run installs). Each must accept every shipped file and refuse a
misspelled action, action parameter, rule-test key and config key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from guardian.runtime.schemas import KINDS, schema_for
from tests.support.checkout import REPO

SHIPPED = {
    "rules": sorted(p for p in (REPO / "rules").glob("*.toml")
                    if not p.name.endswith(".test.toml")),
    "tests": sorted((REPO / "rules").glob("*.test.toml")),
    "config": [REPO / "systemd" / "guardian.toml"],
}
TOML_KINDS = sorted(SHIPPED)  # the audit log's schema is of JSON lines guardian writes
assert set(TOML_KINDS) | {"audit"} == set(KINDS)
GOOD_RULE = '''version = 1

[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"

  [[rule.action]]
  use = "log"
  level = "error"
'''
# each: kind, good text, the misspelling, what the validator must name
MISSPELT = [
    ("rules", GOOD_RULE, ('level = "error"', 'levle = "error"'), "levle"),
    ("rules", GOOD_RULE, ('use = "log"', 'use = "lgo"'), "lgo"),
    ("rules", GOOD_RULE.replace('use = "log"\n  level = "error"',
                                'use = "systemd.unit"\n  allow = ["x.service"]'),
     ('allow = ["x.service"]', 'alow = ["x.service"]'), "alow"),
    ("tests", 'rule_files = ["r.toml"]\n[[test]]\n[[test.expect]]\nat = "1m"\nfiring = []\n',
     ("firing", "firng"), "firng"),
    ("config", '[sources.kmsg]\nreplay = true\n', ("replay", "repaly"), "repaly"),
    # issue 31's keys: an escalation's action parameters, shadow mode, [holds]
    ("rules", GOOD_RULE.replace('when = "memcg.dying > 1"\n',
                                'when = "memcg.dying > 1"\nmode = "observe"\n') +
     '  [[rule.escalate]]\n  use = "notify.webhook"\n  url = "https://chat.example/h"\n'
     '  attempts = 2\n', ("attempts = 2", "atempts = 2"), "atempts"),
    ("config", '[holds]\ndropin = "/etc/guardian/holds.d"\n', ("dropin", "dropn"), "dropn"),
]


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_schemas_are_what_guardian_schema_prints(kind: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "guardian", "schema", kind],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(proc.stdout) == schema_for(kind)
    shipped = json.loads((REPO / "schemas" / f"{kind}.schema.json").read_text())
    assert shipped == schema_for(kind), f"regenerate: guardian schema {kind} > " \
                                        f"schemas/{kind}.schema.json"


@pytest.mark.parametrize("kind", TOML_KINDS)
def test_shipped_files_name_their_schema(kind: str) -> None:
    for path in SHIPPED[kind]:
        first = path.read_text().splitlines()[0]
        assert first == f"#:schema ../schemas/{kind}.schema.json", path


def _check_jsonschema(kind: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed (pip install check-jsonschema)")
    return subprocess.run([exe, "--schemafile", str(REPO / "schemas" / f"{kind}.schema.json"),
                           *map(str, files)], capture_output=True, text=True, timeout=120)


def _taplo(files: list[Path]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("taplo")
    if exe is None:
        pytest.skip("taplo is not installed (npm install -g @taplo/cli)")
    return subprocess.run([exe, "check", *map(str, files)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@pytest.mark.parametrize("kind", TOML_KINDS)
def test_check_jsonschema_accepts_every_shipped_file(kind: str) -> None:
    proc = _check_jsonschema(kind, SHIPPED[kind])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_taplo_accepts_every_shipped_file() -> None:
    proc = _taplo([p for files in SHIPPED.values() for p in files])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _misspelt(tmp_path: Path, kind: str, good: str, fix: tuple[str, str]) -> tuple[Path, Path]:
    """The good and misspelt file, each wired to the shipped schema as shipped files are."""
    (tmp_path / "schemas").mkdir()
    shutil.copy(REPO / "schemas" / f"{kind}.schema.json", tmp_path / "schemas")
    (tmp_path / "d").mkdir()
    head = f"#:schema ../schemas/{kind}.schema.json\n"
    assert fix[0] in good
    ok, bad = tmp_path / "d" / "ok.toml", tmp_path / "d" / "bad.toml"
    ok.write_text(head + good)
    bad.write_text(head + good.replace(fix[0], fix[1]))
    return ok, bad


@pytest.mark.parametrize(("kind", "good", "fix", "named"), MISSPELT,
                         ids=[m[3] for m in MISSPELT])
def test_check_jsonschema_flags_a_misspelling(tmp_path: Path, kind: str, good: str,
                                             fix: tuple[str, str], named: str) -> None:
    ok, bad = _misspelt(tmp_path, kind, good, fix)
    assert _check_jsonschema(kind, [ok]).returncode == 0
    proc = _check_jsonschema(kind, [bad])
    assert proc.returncode != 0 and named in proc.stdout + proc.stderr


@pytest.mark.parametrize(("kind", "good", "fix", "named"), MISSPELT,
                         ids=[m[3] for m in MISSPELT])
def test_taplo_flags_a_misspelling(tmp_path: Path, kind: str, good: str,
                                   fix: tuple[str, str], named: str) -> None:
    ok, bad = _misspelt(tmp_path, kind, good, fix)
    assert _taplo([ok]).returncode == 0
    proc = _taplo([bad])
    assert proc.returncode != 0 and named in proc.stdout + proc.stderr
