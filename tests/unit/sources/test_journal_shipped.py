"""The journal source's shipped pattern sets (guardian/sources/journal_patterns.py):
turned on by name, each pattern scoped to its own units, checked by rule-test samples
whether or not a config includes them. The lines themselves are quoted, with their
origins, in rules/gpu-fabricmanager.test.toml."""

from __future__ import annotations

import pytest

from guardian.core.regexsafety import named_pattern_problem
from guardian.hostio.host import Host
from guardian.sources.journal import JournalConfig, JournalSource
from guardian.sources.journal_patterns import FABRIC_MANAGER_UNIT, PATTERN_SETS

FATAL = ("[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on "
         "fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33")


def test_an_included_set_reads_its_patterns_scoped_to_their_units_only() -> None:
    src = JournalSource(Host(), JournalConfig(include=["nvidia-fabricmanager"]))
    assert src.unconfigured() is None
    assert src.all_units == [FABRIC_MANAGER_UNIT]  # not kubelet's nor containerd's
    assert set(src.patterns) == set(PATTERN_SETS["nvidia-fabricmanager"])
    assert all(units == (FABRIC_MANAGER_UNIT,) for units in src.units.values())
    assert any(a.startswith("--unit=nvidia-fabricmanager") for a in src.argv())


def test_own_patterns_stand_beside_a_set_and_replace_a_shipped_one_of_their_name() -> None:
    cfg = JournalConfig.model_validate({
        "include": ["nvidia-fabricmanager"],
        "patterns": {"pleg": "PLEG is not healthy", "fm_exited": {
            "regex": "exited", "units": ["my-fm.service"]}}})
    scoped = cfg.scoped()
    assert scoped["pleg"] == ("PLEG is not healthy", ("kubelet.service", "containerd.service"))
    assert scoped["fm_exited"] == ("exited", ("my-fm.service",))
    assert scoped["fm_nvswitch_fatal"][1] == (FABRIC_MANAGER_UNIT,)


def test_an_unknown_set_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"no shipped pattern set 'fabricmanager'.*"
                                          r"nvidia-fabricmanager"):
        JournalConfig.model_validate({"include": ["fabricmanager"]})


def test_every_shipped_pattern_passes_the_checks_a_configured_one_must() -> None:
    for patterns in PATTERN_SETS.values():
        for name, p in patterns.items():
            assert named_pattern_problem(name, p.regex) is None, name
            assert p.units and p.origin and p.about, name


def test_samples_check_shipped_sets_not_included_and_the_unit_scope() -> None:
    src = JournalSource(Host())  # nothing configured: the shipped sets are still checked
    assert src.check_sample({"message": FATAL, "unit": FABRIC_MANAGER_UNIT,
                             "matches": ["fm_nvswitch_fatal"]}) is None
    assert src.check_sample({"message": FATAL, "unit": "kubelet.service",
                             "matches": []}) is None
    assert "got:  []" in (src.check_sample({"message": FATAL, "unit": "kubelet.service",
                                            "matches": ["fm_nvswitch_fatal"]}) or "")
    with pytest.raises(ValueError, match="`unit` is text"):
        src.check_sample({"message": FATAL, "unit": 3, "matches": []})
