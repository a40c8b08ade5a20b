"""`guardian replay --plot`: a panel per rule with data, sized to its content, and the
members that made a rule fire always drawn.

Before (issue 40): the shipped incident's plot was 990 x 11,880 px with ~1,200 px blank at
the top, a panel for every rule (empty ones too), and each family kept its first 8 members
by name, so the `unit-crashloop` panel did not show `ecs.service`, the unit that fired it."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from guardian import load_text
from guardian.core.snapshot import Snapshot, labels_of
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.runtime.recording import Recording, read
from guardian.runtime.replay import replay
from tests.support.checkout import DATA, RULES

pytest.importorskip("matplotlib")

from guardian.runtime.plot import DPI, MAX_LINES, PANEL_IN, figure

SMALL_RULES = '''version = 1
[[rule]]
name = "memcg-dying"
summary = "dying memcgs"
when = "memcg.dying > 100"

[[rule]]
name = "memcg-live"
summary = "live memcgs"
when = "memcg.live > 100"

[[rule]]
name = "crashloop"
summary = "a unit restarts over and over"
when = "systemd.unit_restarts_recent >= 5"

[[rule]]
name = "zombies"
summary = "zombies"
when = "processes.zombies >= 5000"
'''


def _recording(*values: dict[str, Any]) -> Recording:
    return Recording({}, [Snapshot(10.0 * i, dict(v), {}) for i, v in enumerate(values)])


def _units(**restarts: float) -> dict[Any, float]:
    return {labels_of({"unit": u}): x for u, x in restarts.items()}


def _png_height(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int(struct.unpack(">I", data[20:24])[0])


def _legend(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_a_panel_per_rule_with_data_and_the_height_follows_the_panels(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    rules = load_text(SMALL_RULES)
    one = _recording({"memcg.dying": 5.0}, {"memcg.dying": 7.0})
    three = _recording({"memcg.dying": 5.0, "memcg.live": 3.0, "systemd.unit_restarts_recent":
                        _units(a=1.0)}, {"memcg.dying": 7.0, "memcg.live": 3.0})
    heights = []
    for rec, names in ((one, ["memcg-dying"]), (three, ["memcg-dying", "memcg-live",
                                                          "crashloop"])):
        fig = figure(rec, rules, replay(rec, rules))
        assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == names
        # the rules without a panel are named, in one line of text: here the blind ones
        note = fig._suptitle.get_text().replace("\n", " ")
        assert note.startswith(f"no panel for {4 - len(names)} rule") and "zombies" in note
        assert "blind the whole time (no value in any snapshot): " in note
        assert not any(n in note for n in names)
        out = tmp_path / f"{len(names)}.png"
        fig.savefig(out, dpi=DPI)
        plt.close(fig)
        heights.append(_png_height(out))
    assert heights[1] - heights[0] == pytest.approx(2 * PANEL_IN * DPI, abs=2)


def test_no_panel_tells_a_rule_with_nothing_to_draw_from_a_blind_one() -> None:
    """Before: "3 rules had no value the whole recording and no panel", a rule whose
    family had no member (its condition false, never unknown) said to have no value."""
    rules = load_text(SMALL_RULES)
    rec = _recording({"memcg.dying": 5.0, "systemd.unit_restarts_recent": {}},
                     {"memcg.dying": 7.0, "systemd.unit_restarts_recent": {}})
    r = replay(rec, rules)
    assert figure(rec, rules, r)._suptitle.get_text().replace("\n", " ") == (
        "no panel for 1 rule with nothing to draw (what they select matched no member in "
        "any snapshot): crashloop; 2 blind the whole time (no value in any snapshot): "
        "memcg-live, zombies")


def test_the_members_that_fired_are_drawn_then_the_largest(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    rules = load_text(SMALL_RULES)
    # eleven units below the threshold, "zz.service" (last by name) above it: it fires
    quiet = {f"a{i:02}.service": 0.3 * i for i in range(11)}
    rec = _recording({"systemd.unit_restarts_recent": _units(**quiet, **{"zz.service": 7.0})})
    r = replay(rec, rules)
    assert [d.rule for d in r.decisions] == ["crashloop"]
    fig = figure(rec, rules, r)
    (ax,) = fig.axes
    labels = _legend(ax)
    assert labels[0] == 'systemd.unit_restarts_recent{unit="zz.service"}  (matched)'
    largest = [f'systemd.unit_restarts_recent{{unit="a{i:02}.service"}}'
               for i in range(10, 10 - (MAX_LINES - 1), -1)]
    assert labels[1:MAX_LINES] == largest
    assert labels[MAX_LINES:] == [f"… {12 - MAX_LINES} more not drawn"]
    plt.close(fig)


def test_the_incident_plot_shows_ecs_service_with_no_blank_band() -> None:
    rec = read(DATA / "incident.rec")
    rules = load_rules([RULES], catalogue={**default_registry().catalogue(), **rec.catalogue})
    r = replay(rec, rules)
    import matplotlib.pyplot as plt
    fig = figure(rec, rules, r)  # what `guardian replay --plot` saves as a PNG
    fig.set_dpi(DPI)
    fig.canvas.draw()  # lays the figure out as savefig does
    panels = {ax.get_title(loc="left").split(":")[0]: ax for ax in fig.axes}
    assert "kernel-oom-kill" in panels and "gpu-dcgm-fallen-off-bus" not in panels
    assert any('unit="ecs.service"' in label for label in _legend(panels["unit-crashloop"]))
    px = fig.bbox.height  # the PNG's height
    assert px < len(panels) * PANEL_IN * DPI + 250  # the panels, a note and the x axis
    # no blank band at the top: the note of rules without data, then at once the first panel
    top = max(ax.get_position().y1 for ax in fig.axes) * px
    note = fig._suptitle.get_window_extent()
    assert px - note.y1 < 15  # the note begins at the top
    assert 0 < note.y0 - top < 40  # room for the first panel's title, no more
    plt.close(fig)
