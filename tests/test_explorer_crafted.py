"""Crafted websocket messages to every widget the explorer builds, on every tab.

A visitor with devtools can send any widget any value its Bokeh model's type allows: ±inf, NaN,
1e300 or -1 to a number, an option a menu does not list, None, a position past the last step, a
1 MiB or NUL-holding string to a text box. The sweep walks the page's Panel layout (every tab,
the timeline's steps and the corpus profile's menus shown), gives each widget the crafted values
of its kind, as Panel applies a browser's change (`_process_events`), and wants no "Callback
failed", no traceback and no error in the log: a choice widget keeps its choice and says why
(`attnlab.app.explorer.screen`), a number box keeps its value or takes it within the store's
limits, a text box takes the text, and the page's buttons then read it without a traceback.

A value the widget's Bokeh property does not take (a string for a check box, None for a text
box) is refused by the Bokeh server when it applies the message, before Panel or attnlab see it:
those are left out (`bokeh_takes`), and each kind's test says how many it left out.

A crafted message can also set any other property of any Bokeh model of the page, and Panel
applies each of a widget's `_linked_properties` to it (and the tabs' `tabs` and `active`): the
last test sends every one of them crafted values, taps the grids at crafted points and under
crafted `tags`, patches the tables' data, and clicks the downloads while they are off.
"""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document
from bokeh.events import Tap
from test_notebooks import make_checkpoints

from attnlab.app.checkpoints import open_model
from attnlab.app.explorer import Explorer
from attnlab.app.explorer.boxes import AlphaInput, BeamInput
from attnlab.app.explorer.keys import ArrowKeys
from attnlab.app.roots import CheckpointRoots
from attnlab.decode.loading import load
from attnlab.decode.profile import profile, write_profile

BIG = "x" * (1 << 20)
# the widget kinds of the page (checked in this order: a subclass before its base), and what a
# crafted message sends each: {Bokeh property: values}
KINDS: list[tuple[type, str]] = [
    (pn.widgets.Select, "menu"),
    (pn.widgets.RadioButtonGroup, "buttons"),
    (pn.widgets.MultiChoice, "heads"),
    (pn.widgets.IntSlider, "slider"),  # the timeline's steps (a DiscreteSlider's own slider)
    (BeamInput | AlphaInput, "number"),
    (pn.widgets.TextAreaInput | pn.widgets.TextInput, "text"),
    (pn.widgets.Checkbox, "checkbox"),
    (pn.widgets.FileDownload, "download"),
    (pn.widgets.Button, "button"),  # a click carries no value: each is pressed
    (pn.widgets.DiscreteSlider | pn.widgets.StaticText, "shown"),  # no property a browser sends
]
NUMBERS = [math.inf, -math.inf, math.nan, 1e300, -1, 99, 2.5, None]
CRAFTED: dict[str, dict[str, list[Any]]] = {
    "menu": {"value": ["no such option", "", None, 7, ["a"], BIG]},
    "buttons": {"active": [-1, 99, None, 1.0, "0"]},
    "heads": {"value": [["no such head"], ["FIRST", "no such head"], [None], "FIRST"]},  # FIRST: its first label
    "slider": {"value": NUMBERS, "value_throttled": NUMBERS},
    "number": {"value": NUMBERS, "value_throttled": NUMBERS},
    "text": {"value": [BIG, "a\0b", "\ud800", None, 5], "value_input": [BIG, "a\0b", None]},
    "checkbox": {"active": [None, "x", 2, math.nan]},
    "download": {"clicks": [-1, 99, math.inf, None]},
    "button": {},
    "shown": {},
}
CHOICES = ("menu", "buttons", "heads", "slider")  # nothing crafted is among their choices: refused


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with a run that recorded probes at steps 10, 20, 30 (the Training timeline's
    slider), the tiny translator and parser (the Compare menu), and a profile (the Corpus menus)."""
    root = tmp_path_factory.mktemp("crafted") / "lab"
    paths = make_checkpoints(root)
    run = root / "run"
    shutil.copytree(paths["translate"], run)
    trace = open_model(run).score("the dog runs .", "der hund läuft .", record=True).trace
    for step in (10, 20, 30):
        trace.save(run / "probes" / f"step_{step}" / "probe_0.trace")
    table = profile(load(run), ["the dog runs .", "a girl sits ."])
    write_profile(table, root / "profiles" / "run.parquet", {"checkpoint": "run", "mode": "translate"})
    return root


def whole_page(root: Path) -> Explorer:
    """The explorer on the run, every tab opened once, the profile open and a head of it picked."""
    explorer = Explorer({"run": str(root / "run"), "parser": str(root / "tiny-parser")}, CheckpointRoots([root]))
    explorer.open_listed("run")
    for tab in range(len(explorer.tabs)):
        explorer.tabs.active = tab
    assert explorer.corpus.open("profiles/run.parquet")
    explorer.corpus.pick("cross", 0, 0)
    explorer.tabs.active = 3  # the timeline: its slider and probe menu are shown
    assert explorer.timeline.step.visible and not explorer.store.error, explorer.store.error
    explorer.store.notices = []
    return explorer


def kind_of(widget: pn.widgets.Widget) -> str | None:
    return next((kind for cls, kind in KINDS if isinstance(widget, cls)), None)


def bokeh_takes(model: Any, prop: str, value: Any) -> bool:
    """Whether the Bokeh server applies `value` to `prop` of `model` (it checks the property's
    type first, and answers a message it refuses with an error before any callback runs)."""
    return model.lookup(prop).property.is_valid(value)


def shown(model: Any, prop: str) -> Any:
    """What the browser's copy of a widget shows (None for a property never set, as a number
    box's `value_throttled` before a first change)."""
    return model.properties_with_values(include_defaults=True).get(prop) if prop in model.properties() else None


def first_head(crafted: Any, label: str) -> Any:
    """`crafted` with the picker's first label for "FIRST"."""
    if isinstance(crafted, list):
        return [label if c == "FIRST" else c for c in crafted]
    return label if crafted == "FIRST" else crafted


def same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def press_every_button(explorer: Explorer) -> None:
    for button in explorer.layout.select(pn.widgets.Button):
        button.clicks += 1  # as Panel applies a click (`on_click` watches `clicks`)


def values(explorer: Explorer) -> list[Any]:
    return [getattr(w, "value", None) for w in explorer.layout.select(pn.widgets.Widget)]


@pytest.mark.parametrize("kind", [kind for _, kind in KINDS])
def test_a_crafted_value_for_any_widget_is_one_line_never_a_traceback(
    kind: str, lab: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every widget of `kind` on the page gets every crafted value of its kind (those its Bokeh
    property takes): Panel logs no "Callback failed", nothing logs an error or a traceback, and
    what the page says is one line each. A menu, a button row, the heads picker and the step
    slider keep their choice (every widget on the page keeps its value), say so in one notice
    and show the kept choice again; a number box keeps its value with a notice or takes it; a
    text box takes the text, and every button then reads it."""
    monkeypatch.setattr(logging.getLogger("panel"), "propagate", True)  # Panel's log, where caplog reads it
    caplog.set_level(logging.WARNING, logger="panel")  # (not its debug lines, each with the 1 MiB string)
    explorer = whole_page(lab)
    store, widgets = explorer.store, explorer.layout.select(pn.widgets.Widget)
    assert [w.name for w in widgets if kind_of(w) is None] == []  # every widget the page builds is swept
    chosen = [w for w in widgets if kind_of(w) == kind]
    assert chosen, f"no {kind} on the page"
    sent = left_out = 0
    for widget in chosen:
        if kind == "shown":
            assert not widget._linked_properties  # the browser sends it nothing
            continue
        if kind == "button":
            widget.clicks += 1
            sent += 1
            continue
        model = widget.get_root(Document())  # the browser's copy: shows the kept choice again after a refusal
        for prop, crafted_values in CRAFTED[kind].items():
            for crafted in crafted_values:
                if kind == "heads":  # FIRST: a head the picker offers, beside one it does not
                    crafted = first_head(crafted, widget.labels[0])
                if not bokeh_takes(model, prop, crafted):
                    left_out += 1
                    continue
                sent += 1
                before, showing, refusals = values(explorer), shown(model, prop), len(store.notices)
                widget._process_events({prop: crafted})  # raised, and Panel logged "Callback failed"
                where = f"{widget.name!r} {prop}={str(crafted)[:20]!r}"
                if kind in CHOICES and not (kind == "menu" and crafted in widget.unicode_values):
                    assert values(explorer) == before, where  # no other choice, on this widget or any
                    assert "is not one of its choices" in store.notices[-1], (where, store.notices)
                    assert same(shown(model, prop), showing), where
                elif kind == "number":
                    if len(store.notices) > refusals:  # refused: every value kept, the browser shows it again
                        assert values(explorer) == before and same(shown(model, prop), showing), (where, store.notices)
                    explorer.translate()  # decodes with what the box took, within the store's limits
                elif kind == "text":
                    assert getattr(widget, prop) == crafted, where
                    press_every_button(explorer)
                assert all("\n" not in said for said in [store.error, *store.notices]), (where, store.error)
    print(f"{kind}: {len(chosen)} widget(s), {sent} crafted messages applied, {left_out} refused by Bokeh")
    assert sent or kind in ("checkbox", "shown")  # Bokeh takes only True or False for a check box
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert "Callback failed" not in caplog.text and "Traceback" not in caplog.text and errors == []


def test_a_crafted_row_of_the_dashboard_or_corpus_table_is_one_notice(
    lab: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The dashboard's and the corpus sentences' tables are Bokeh tables, not Panel widgets (the
    sweep does not see them): a browser picks a row by its index. A crafted -1 opened the last
    head or sentence without a word, and 999 in the dashboard was an IndexError traceback: each
    is one notice, and the open head stays; a real row still opens."""
    explorer = whole_page(lab)
    store, opened = explorer.store, []
    monkeypatch.setattr(explorer.corpus, "open_sentence", lambda *picked: opened.append(picked))
    head = (store.kind, store.layer, store.head)
    for table, pick in (("Heads dashboard", explorer.dashboard._selected), ("Corpus", explorer.corpus._clicked)):
        for crafted in (-1, 999):
            pick("indices", [], [crafted])
            assert (store.kind, store.layer, store.head) == head and opened == []
            assert store.notices[-1] == f"{table}: {crafted} is not one of its choices; it stays at {store.open_head}."
    explorer.dashboard._selected("indices", [], [1])
    explorer.corpus._clicked("indices", [], [1])
    assert (store.kind, store.layer, store.head) == ("encoder", 0, 1) and len(opened) == 1
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


# what a page sends (`attnlab.app.explorer.screen.BROWSER`): every other linked property is crafted
VISITORS = {"value", "value_input", "value_throttled", "active", "clicks"}
OTHER = ["../../etc/passwd", "", ["../../etc/passwd", "x"], 99, -1, 1e300, True, False, None, {"x": 1}]


def settings(explorer: Explorer) -> dict[str, Any]:
    """What a crafted property must not change: every widget's and the tabs' parameters, the
    store's choices and limits, and which checkpoint is open."""
    store = explorer.store
    said = {id(w): dict(w.param.values()) for w in [*explorer.layout.select(pn.widgets.Widget), explorer.tabs]}
    limits = {name: (store.param[name].objects or store.param[name].bounds) for name in ("kind", "layer", "head")}
    limits.update(beam=store.param.beam.bounds, alpha=store.param.alpha.bounds)
    kept = ("checkpoint", "kind", "layer", "head", "beam", "alpha", "greedy", "time_limit", "trace", "lang")
    return {"widgets": said, "limits": limits, "store": {name: getattr(store, name) for name in kept}}


def test_a_crafted_change_of_another_property_is_dropped(
    lab: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every property but a visitor's that Panel applies from a browser -- a menu's options, a
    button row's labels (the kind buttons' "foo" was a ValueError that looped into a
    RecursionError), a menu's disabled options (the open one's was a ValueError), a number box's
    or slider's limits, a widget's name, `disabled`, a download's file name or `embed`, the tabs'
    `tabs` (closed tabs) -- changes no widget, no choice, no limit of the store and no open
    checkpoint, and logs nothing. The tabs take only a tab they have (99 was a ValueError, -1
    showed none), with a notice. A tap on a grid at a crafted point ("0" was a TypeError), or
    under crafted `tags` (a layer the grid lacks was a ValueError, [] an IndexError), opens a
    head the grid has or none; a table whose data a browser patched still opens the row the
    server listed; a download still off (no trace yet) takes no click and no `embed` (each was a
    ValueError)."""
    monkeypatch.setattr(logging.getLogger("panel"), "propagate", True)
    caplog.set_level(logging.WARNING)
    explorer = whole_page(lab)
    store, sent = explorer.store, 0
    for widget in [*explorer.layout.select(pn.widgets.Widget), explorer.tabs]:
        model = widget.get_root(Document()) if widget._linked_properties else None
        for prop in [p for p in widget._linked_properties if p not in VISITORS]:
            for crafted in [*OTHER, [shown(model, "value")]]:  # (the open choice: a menu's disabled options)
                if not bokeh_takes(model, prop, crafted):
                    continue
                before, sent = settings(explorer), sent + 1
                widget._process_events({prop: crafted})
                where = f"{type(widget).__name__} {widget.name!r} {prop}={str(crafted)[:30]}"
                assert settings(explorer) == before, where
    tabs = explorer.tabs  # a browser closing tabs: Panel hands `tabs` over as the kept tabs' panes
    for crafted in ({"tabs": tabs.objects[:2]}, {"active": 99}, {"active": -1}):
        before = settings(explorer)
        tabs._process_events(crafted)
        assert settings(explorer) == before, crafted
    assert store.notices[-1] == "Tabs: -1 is not one of its choices; it stays at Training timeline."
    print(f"{sent} crafted properties applied")

    explorer.tabs.active = 0  # the Heads grid, then the corpus profile's grids and tables
    grid, opened = explorer.heads.grid.object, []
    for x, y in ((0.5, 0.5), ("0", 0.5), ([0], None), (math.nan, math.inf)):
        grid._trigger_event(Tap(grid, x=x, y=y))
    grid.tags = [{"layers": [99], "heads": [99]}]
    grid._trigger_event(Tap(grid, x=0.5, y=0.5))
    grid.tags = []
    grid._trigger_event(Tap(grid, x=1.7, y=0.5))
    assert (store.kind, store.layer, store.head) == ("cross", 1, 1)  # the grid's own head there
    for profile_grid in explorer.corpus.grids.objects:
        profile_grid.object._trigger_event(Tap(profile_grid.object, x="0", y=0.5))
    monkeypatch.setattr(explorer.corpus, "open_sentence", lambda *picked: opened.append(picked))
    explorer.tabs.active = 2
    for table in (explorer.dashboard.figures.objects[0].object, explorer.corpus.table.object):
        source = table.source
        source.data = {name: ["../../etc/passwd"] * len(column) for name, column in source.data.items()}
        source.selected.indices = [1]
    assert (store.kind, store.layer, store.head) == (
        store.stats[1]["kind"],
        store.stats[1]["layer"],
        store.stats[1]["head"],
    )
    assert [source for source, _, _ in opened] == [explorer.corpus.rows[1]["source"]]

    fresh = Explorer({"run": str(lab / "run")}, CheckpointRoots([lab]))  # nothing decoded: the downloads are off
    for download in fresh.export.layout.select(pn.widgets.FileDownload):
        download.get_root(Document())
        for crafted in ({"clicks": 1}, {"embed": True}, {"disabled": False}, {"clicks": 2}):
            download._process_events(crafted)
        assert download.disabled and download.data is None
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert "Callback failed" not in caplog.text and "Traceback" not in caplog.text and errors == []


def test_the_step_slider_writes_steps_as_the_titles_do(lab: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of thousands of steps: the slider said "training step: 1900" beside a title of "step
    1,900" and a note of "steps 300–3,026"; it writes "1,900" too, and so does its notice."""
    from attnlab.app.checkpoints import probe_snapshots
    from attnlab.app.explorer import timeline

    def far(checkpoint: Path, allows: object) -> list[tuple[int, list[Path]]]:  # the run's probes, 100× later
        return [(step * 100, files) for step, files in probe_snapshots(checkpoint, allows)]

    monkeypatch.setattr(timeline, "probe_snapshots", far)
    explorer = Explorer({"run": str(lab / "run")}, CheckpointRoots([lab]))
    explorer.open_listed("run")
    explorer.tabs.active = 3
    slider = explorer.timeline.step
    assert slider.options == {"1,000": 1000, "2,000": 2000, "3,000": 3000} and slider.value == 1000
    slider._slider._process_events({"value": 7})  # a position a crafted request sends
    assert explorer.store.notices[-1].endswith("it stays at 1,000.")


def test_the_arrow_keys_move_the_open_head_and_take_nothing_else(lab: Path) -> None:
    """← → open the head before or after, ↑ ↓ the layer above or below in the grid, stopping at the
    ends; what else a crafted message sends the keys' element (a long string, None, a number, another
    key, its size or visibility) changes nothing and says nothing."""
    explorer = Explorer({"run": str(lab / "run")}, CheckpointRoots([lab]))
    explorer.open_listed("run")
    (keys,) = explorer.layout.select(ArrowKeys)
    store = explorer.store
    store.select(kind="encoder", layer=0, head=0)
    opened = []
    for n, key in enumerate(["ArrowRight", "ArrowDown", "ArrowDown", "ArrowUp", "ArrowUp", "ArrowLeft", "ArrowLeft"]):
        keys._process_events({"pressed": f"{key} {n}"})  # as Panel applies the browser's message
        opened.append((store.layer, store.head))
    assert store.kind == "encoder" and (len(store.param.layer.objects), len(store.param.head.objects)) == (2, 4)
    assert opened == [(0, 1), (1, 1), (1, 1), (0, 1), (0, 1), (0, 0), (0, 0)]  # the tiny model: no wrapping round
    notices = list(store.notices)
    for crafted in ("x" * 1000, None, 5, "Enter 1", "", "ArrowRight" * 5):
        keys._process_events({"pressed": crafted})
    for prop, crafted in (("width", 500), ("visible", False), ("css_classes", ["x"])):
        keys._process_events({prop: crafted})
        assert getattr(keys, prop) != crafted
    assert (store.layer, store.head) == (0, 0) and store.notices == notices and not store.error
