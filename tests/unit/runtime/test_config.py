"""guardian's config file: defaults, per-source options, and errors at path:line:col."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.hostio.host import Host
from guardian.plugin.registry import default_registry
from guardian.runtime.collector import Collector
from guardian.runtime.config import load_config
from tests.support.checkout import REPO, write


def test_shipped_sample_config_loads() -> None:
    cfg = load_config(REPO / "systemd" / "guardian.toml", default_registry())
    assert cfg.engine.interval == 15.0 and cfg.engine.budget.runs == 20
    assert set(cfg.sources) == {"cpu", "kmsg", "ethtool", "systemd", "processes"}


def test_the_shipped_config_observes_until_told_to_act() -> None:
    """What `guardian init` and the packages install observes (docs/install.md, "First
    boot"); guardian without a config file acts, as before. Before: the shipped file set no
    dry_run, so a fresh install acted at once."""
    shipped = load_config(REPO / "systemd" / "guardian.toml", default_registry())
    assert shipped.service.dry_run is True
    assert load_config(None, default_registry()).service.dry_run is False


def test_options_reach_the_sources(tmp_path: Path) -> None:
    p = write(tmp_path, "g.toml", '''
[sources]
disabled = ["pressure"]
[sources.kmsg]
patterns = { gpu_xid = "NVRM: Xid" }
[sources.cpu]
hot_pct = 50
''')
    cfg = load_config(p, default_registry())
    coll = Collector.from_registry(Host(), default_registry(), cfg)
    if "kmsg" in coll.unavailable:  # a user may not read the kernel log: a recorded one
        coll.close()
        host = Host(tmp_path / "host")
        host.root.mkdir()
        for name in ("proc", "sys"):
            (host.root / name).symlink_to(f"/{name}")
        write(host.root / "dev", "kmsg", "6,1,0,-;a recorded line\n")
        coll = Collector.from_registry(host, default_registry(), cfg)
    names = {s.name for s in coll.sources} | set(coll.unavailable)
    assert "pressure" not in names
    kmsg = next(s for s in coll.sources if s.name == "kmsg")
    assert "gpu_xid" in kmsg.patterns and "ena_reset_triggered" in kmsg.patterns  # type: ignore[attr-defined]
    cpu = next(s for s in coll.sources if s.name == "cpu")
    assert cpu.hot_pct == 50  # type: ignore[attr-defined]
    coll.close()


def test_every_config_error_has_a_position(tmp_path: Path) -> None:
    p = write(tmp_path, "g.toml", '''[engine]
interval = "soon"

[sources]
disabled = ["presure"]

[sources.kmsg]
patterns = { bad = "([" }

[sources.cpuu]
hot_pct = 50

[sources.cpu]
hot_pct = 500
''')
    with pytest.raises(RuleError) as info:
        load_config(p, default_registry())
    got = [f"{d.line}:{d.col}: {d.message}" for d in info.value.diagnostics]
    assert got[0].startswith("2:12: engine.interval: bad duration 'soon'")
    assert got[1].startswith("5:12: unknown source 'presure'")
    assert got[2].startswith("8:12: source 'kmsg': patterns: pattern 'bad': bad regular")
    assert got[3].startswith("10:1: unknown source 'cpuu'")
    assert got[4].startswith("14:11: source 'cpu': hot_pct: Input should be less than")
    assert len(got) == 5


def test_fleet_section(tmp_path: Path) -> None:
    p = write(tmp_path, "g.toml", '[fleet]\nmax_nodes = 3\nmin_healthy = "90%"\nttl = 60\n')
    cfg = load_config(p, default_registry())
    assert cfg.fleet is not None and cfg.fleet.max_nodes == 3  # type: ignore[attr-defined]
    bad = write(tmp_path, "b.toml", '[fleet]\nmin_healthy = "most"\nmax_nodes = 0\n')
    with pytest.raises(RuleError) as info:
        load_config(bad, default_registry())
    got = [f"{d.line}:{d.col}: {d.message}" for d in info.value.diagnostics]
    assert got[0].startswith("2:15: fleet.min_healthy: min_healthy 'most': expected a "
                             "count")
    assert got[1].startswith("3:13: fleet.max_nodes: Input should be greater than or "
                             "equal to 1")


def test_an_error_names_the_table_it_is_in(tmp_path: Path) -> None:
    """The key's whole path, and a [[group]] by its name or place. Before:
    `breaker.window: bad duration...` and a bare `mode: Input should be...`."""
    pytest.importorskip("lightkube")  # [fleet] is the k8s extra's
    p = write(tmp_path, "g.toml", '[fleet]\nmax_nodes = 1\n\n[fleet.breaker]\n'
              'window = "10 minutes"\n\n[[group]]\nname = "a"\n\n[[group]]\n'
              'name = "gpu"\nlabels = { pool = "gpu" }\nmode = "shadwo"\n\n'
              '[[group]]\nlabels = { pool = "cpu" }\nmode = "dry"\n')
    with pytest.raises(RuleError) as info:
        load_config(p, default_registry())
    assert [f"{d.line}:{d.col}: {d.message}" for d in info.value.diagnostics] == [
        "5:10: fleet.breaker.window: bad duration '10 minutes'; expected a number with a "
        'unit (ms, s, m, h, d, w), e.g. "90s", "5m", "1h30m"',
        "13:8: [[group]] 'gpu': mode: Input should be 'act' or 'shadow'",
        "15:1: [[group]] #3: missing required key 'name'",
        "17:8: [[group]] #3: mode: Input should be 'act' or 'shadow'"]


def test_the_daemonset_configmap_config_loads(tmp_path: Path) -> None:
    text = (REPO / "deploy" / "kubernetes" / "configmap.yaml").read_text()
    body = text.split("guardian.toml: |\n", 1)[1].split("\n---", 1)[0]
    toml_text = "\n".join(line[4:] for line in body.splitlines())
    cfg = load_config(write(tmp_path, "g.toml", toml_text), default_registry())
    assert cfg.fleet is not None and cfg.sources["systemd"].systemctl[0] == "nsenter"  # type: ignore[attr-defined]


def test_every_rule_file_in_the_daemonset_configmap_loads(tmp_path: Path) -> None:
    """The rules ConfigMap (node-problem-detector's conditions and events among them)
    is checked like any rule file, with the Kubernetes actions installed."""
    import yaml

    from guardian.policy.loader import load_rules
    docs = list(yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "rules.yaml")
                                   .read_text()))
    rules = next(d for d in docs if d["metadata"]["name"] == "guardian-rules")["data"]
    assert "kernel.toml" in rules
    for name, text in rules.items():
        write(tmp_path, name, text)
    loaded = load_rules([tmp_path])
    uses = {a.use for r in loaded.rules for a in r.actions}
    assert {"kube.condition", "kube.event"} <= uses


# -- drop-ins: guardian.toml.d/*.toml merged onto guardian.toml (issue 41) ---------------

def test_dropins_merge_onto_the_shipped_config_in_lexical_order(tmp_path: Path) -> None:
    """Before: only guardian.toml was read; an import had to be appended to it, and the
    shipped `patterns = {}` then made TOML refuse a second [sources.kmsg.patterns]."""
    main = write(tmp_path, "guardian.toml", (REPO / "systemd" / "guardian.toml").read_text())
    write(tmp_path, "guardian.toml.d/50-npd-b.toml",
          '[sources.kmsg.patterns]\nacme = "^acme: wedged"\n[engine]\ninterval = "5s"\n')
    write(tmp_path, "guardian.toml.d/20-npd-a.toml",
          '[sources.kmsg.patterns]\nwidget = "^widget: stuck"\n[engine]\ninterval = "7s"\n'
          '[engine.budget]\nruns = 4\n[service]\nrules = ["/a", "/b"]\n')
    write(tmp_path, "guardian.toml.d/90-site.toml", '[service]\nrules = ["/site"]\n')
    write(tmp_path, "guardian.toml.d/notes.txt", "not a drop-in")
    write(tmp_path, "guardian.toml.d/.hidden.toml", "[[[ never read")
    cfg = load_config(main, default_registry())
    kmsg = cfg.sources["kmsg"]
    assert kmsg.patterns == {"widget": "^widget: stuck", "acme": "^acme: wedged"}  # type: ignore[attr-defined]
    assert kmsg.facilities == ["kern"]  # type: ignore[attr-defined]  # the main file's
    assert cfg.engine.interval == 5.0  # a later value wins
    assert (cfg.engine.budget.runs, cfg.engine.budget.within) == (4, 3600.0)  # key by key
    assert cfg.service.rules == ["/site"]  # a list is replaced, never appended
    assert cfg.service.dry_run is True
    assert [Path(p).name for p in cfg.dropins] == ["20-npd-a.toml", "50-npd-b.toml",
                                                   "90-site.toml"]


def test_a_dropin_error_is_located_in_the_dropin(tmp_path: Path) -> None:
    main = write(tmp_path, "guardian.toml", '[engine]\ninterval = "15s"\n')
    bad = write(tmp_path, "guardian.toml.d/10-bad.toml",
                '# a site override\n[engine]\ninterval = "soon"\n[sources.kmsg]\nfacilites = []\n')
    with pytest.raises(RuleError) as exc:
        load_config(main, default_registry())
    got = sorted(str(d) for d in exc.value.diagnostics)
    assert len(got) == 2 and all(g.startswith(f"{bad}:") for g in got), got
    assert got[0].startswith(f"{bad}:3:12: engine.interval") and "facilities" in got[1], got
    syntax = write(tmp_path, "guardian.toml.d/20-syntax.toml", "[engine\n")
    with pytest.raises(RuleError) as exc:
        load_config(main, default_registry())
    assert any(str(d).startswith(f"{syntax}:1:") for d in exc.value.diagnostics)


def test_a_table_against_a_value_is_an_error_naming_both_places(tmp_path: Path) -> None:
    main = write(tmp_path, "guardian.toml", '[engine]\nbudget = { runs = 5, within = "1h" }\n')
    drop = write(tmp_path, "guardian.toml.d/a.toml", "[engine]\nbudget = 3\n")
    with pytest.raises(RuleError) as exc:
        load_config(main, default_registry())
    (d,) = exc.value.diagnostics
    assert (d.path, d.line) == (str(drop), 2)
    assert "engine.budget is a value here and a table in" in d.message
    assert f"{main}:2:1" in d.message


def test_an_unreadable_dropin_directory_is_an_error(tmp_path: Path) -> None:
    main = write(tmp_path, "guardian.toml", "")
    write(tmp_path, "guardian.toml.d", "a file, not a directory")
    with pytest.raises(RuleError, match="drop-in directory"):
        load_config(main, default_registry())


def test_no_pip_no_pip_advice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The .deb's environment has no pip: the [fleet] error told it to `pip install`."""
    import sys

    from guardian.core import install

    main = write(tmp_path, "guardian.toml", "[fleet]\nmax_nodes = 1\n")
    monkeypatch.setitem(sys.modules, "guardian.kube.fleet", None)  # no k8s extra
    monkeypatch.setattr(install, "pip_works", lambda: False)
    with pytest.raises(RuleError) as exc:
        load_config(main, default_registry())
    message = exc.value.diagnostics[0].message
    assert "pip install" not in message and "container image" in message, message
    monkeypatch.setattr(install, "pip_works", lambda: True)
    with pytest.raises(RuleError) as exc:
        load_config(main, default_registry())
    assert f"{sys.executable} -m pip install 'node-guardian[k8s]'" in \
        exc.value.diagnostics[0].message
