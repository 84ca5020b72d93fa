"""The notebook explorer's error line says what went wrong in the reader's last action, never an
earlier one's: every action that can report an error (the hypothesis menu, a reading's box, the
attribution box and its menus, the paths box and its sender menu, the circuit's menus) clears it
first, as a run and a patch do; an action made of several parts (opening a hypothesis) clears it
once, before all of them, so that one part's error is not wiped by the next part. The same in the
compare widget (its attribution and circuit boxes and their menus; a run is the larger action).
Random-weight tiny models, as in test_widgets.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_notebooks import make_checkpoints

import attnlab
from attnlab import widgets
from attnlab.app import compare_circuit_widget, compare_widget, patching_widget

SENTENCE, CHANGED = "A man sits on a bike .", "A dog sits on a bike ."


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models decode faster on one thread (see test_widgets.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> attnlab.decode.Model:
    paths: dict[str, Path] = make_checkpoints(tmp_path_factory.mktemp("widget-errors"))
    return attnlab.load(paths["translate"])


def refused(explorer: widgets.Explorer) -> str:
    """An action the library refuses (a direction that is not one): the error line says it."""
    assert explorer.patch(CHANGED, direction="up") is None
    assert "denoise or noise" in explorer.errors.message and explorer.errors.value
    return explorer.errors.message


def cleared(explorer: widgets.Explorer) -> bool:
    return explorer.errors.message == "" and explorer.errors.value == ""


def broken_lens(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("no lens")


def failing_lens(explorer: widgets.Explorer) -> None:
    """`Explorer._draw_lens` when the lens fails: a reading's error, said in the error line."""
    explorer._draw_reading(explorer.show_lens, explorer.lens, broken_lens)


def test_choosing_a_hypothesis_clears_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer = widgets.explore(translator, text=SENTENCE, beam=3)
    refused(explorer)
    explorer.choose(1)
    assert cleared(explorer), explorer.errors.message
    assert explorer.view.trace is explorer.result.hypotheses[1].trace
    # a part of opening a hypothesis that fails says so, and the parts after it do not wipe that
    monkeypatch.setattr(widgets.Explorer, "_draw_lens", failing_lens)
    explorer.show_lens.value = True
    assert explorer.errors.message == "RuntimeError: no lens"
    explorer.choose(2)
    assert explorer.errors.message == "RuntimeError: no lens"  # (its own, not the last action's)
    monkeypatch.undo()
    explorer.choose(0)
    assert cleared(explorer) and explorer.figures["lens"] is not None


def test_ticking_a_reading_clears_an_earlier_error(translator: attnlab.decode.Model) -> None:
    explorer = widgets.explore(translator, text=SENTENCE, beam=2)
    for box, figure in ((explorer.show_lens, "lens"), (explorer.show_importance, "importance")):
        refused(explorer)
        box.value = True
        assert cleared(explorer) and explorer.figures[figure] is not None, figure
        refused(explorer)
        box.value = False
        assert cleared(explorer) and explorer.figures[figure] is None, figure


def test_the_attribution_box_and_its_menus_clear_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer = widgets.explore(translator, text=SENTENCE, beam=2)
    box = explorer.attribution
    refused(explorer)
    box.show.value = True
    assert cleared(explorer) and explorer.figures["attribution"] is not None
    refused(explorer)
    box.against.value = "runner-up"
    assert cleared(explorer) and box.attribution.against == "runner-up"
    refused(explorer)
    positions = [value for _label, value in box.position.options]
    box.position.value = next(p for p in positions if p != box.position.value)
    assert cleared(explorer)
    a_failing_piece_is_said(box, explorer.errors, monkeypatch)


def a_failing_piece_is_said(box: object, errors: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attribution box's piece the figures fail on is said in the error line, not raised into
    the log console (the menu redrew outside the error box)."""
    monkeypatch.setattr(widgets.viz, "logit_attribution_figure", broken_lens)
    positions = [value for _label, value in box.position.options]
    box.position.value = positions[0] if box.position.value != positions[0] else positions[1]
    assert errors.message == "RuntimeError: no lens"


def test_the_circuit_menus_clear_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer = widgets.explore(translator, text=SENTENCE, beam=2)
    paths_box = explorer.patching_row.paths_box
    circuit_box = paths_box.circuit_box
    explorer.patch(CHANGED)
    paths_box.split.value = True
    assert explorer.figures["circuit"] is not None and cleared(explorer)
    monkeypatch.setattr(widgets.Explorer, "_draw_lens", failing_lens)  # (a refused patch takes the circuit away)
    for menu, value in ((circuit_box.threshold, 0.02), (circuit_box.senders, 2)):
        explorer.show_lens.value = True
        assert explorer.errors.message == "RuntimeError: no lens"
        menu.value = value
        assert cleared(explorer) and circuit_box.circuit is not None, menu.description
        explorer.show_lens.value = False


def test_the_paths_box_and_its_sender_menu_clear_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    explorer = widgets.explore(translator, text=SENTENCE, beam=2)
    paths_box = explorer.patching_row.paths_box
    explorer.patch(CHANGED)
    monkeypatch.setattr(widgets.Explorer, "_draw_lens", failing_lens)  # (a refused patch takes the paths away)
    explorer.show_lens.value = True
    assert explorer.errors.message == "RuntimeError: no lens"
    paths_box.split.value = True
    assert cleared(explorer) and explorer.figures["paths_direct"] is not None
    explorer.show_lens.value = False
    explorer.show_lens.value = True
    assert explorer.errors.message == "RuntimeError: no lens"
    paths_box.sender.value = [value for _label, value in paths_box.sender.options][1]
    assert cleared(explorer) and explorer.figures["paths_receivers"] is not None
    explorer.show_lens.value = False
    explorer.show_lens.value = True
    paths_box.split.value = False
    assert cleared(explorer) and explorer.figures["paths_direct"] is None
    # a split that fails is said in the error line, not raised into the log console
    monkeypatch.setattr(patching_widget, "trace_path_patching", broken_lens)
    paths_box.split.value = True
    assert explorer.errors.message == "RuntimeError: no lens"


def failing_lenses(widget: widgets.Compare, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compare widget's lenses fail while ticked: an error in its error line (cleared by
    unticking them, the box's own action), that the next action must clear."""
    monkeypatch.setattr(compare_widget, "logit_lens", broken_lens)
    widget.show_lenses.value = False
    widget.show_lenses.value = True
    assert widget.errors.message == "RuntimeError: no lens"


def test_the_compare_attribution_box_and_its_menus_clear_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    widget = widgets.compare_models(translator, text=SENTENCE)
    box = widget.attributions
    failing_lenses(widget, monkeypatch)
    box.show.value = True
    assert widget.errors.message == "" and widget.figures["attribution_first"] is not None
    failing_lenses(widget, monkeypatch)
    box.against.value = "runner-up"
    assert widget.errors.message == "" and box.attributions[0].against == "runner-up"
    failing_lenses(widget, monkeypatch)
    positions = [value for _label, value in box.position.options]
    box.position.value = next(p for p in positions if p != box.position.value)
    assert widget.errors.message == ""
    failing_lenses(widget, monkeypatch)
    widget.run()  # a run reads the box again as one of its parts: the lenses' error stays
    assert widget.errors.message == "RuntimeError: no lens" and widget.figures["attribution_first"] is not None
    a_failing_piece_is_said(box, widget.errors, monkeypatch)


def test_the_compare_circuit_box_and_its_menus_clear_an_earlier_error(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    widget = widgets.compare_models(translator, text=SENTENCE)
    box = widget.circuits
    widget.patch(CHANGED)
    failing_lenses(widget, monkeypatch)
    box.show.value = True
    assert widget.errors.message == "" and widget.figures["circuit_first"] is not None
    for menu, value in ((box.threshold, 0.02), (box.senders, 2)):
        failing_lenses(widget, monkeypatch)
        menu.value = value
        assert widget.errors.message == "" and widget.figures["circuit_first"] is not None, menu.description
    failing_lenses(widget, monkeypatch)
    widget.run()  # a run draws the circuits again as one of its parts: the lenses' error stays
    assert widget.errors.message == "RuntimeError: no lens" and widget.figures["circuit_first"] is not None
    # circuits that fail are said in the error line, not raised into the log console
    monkeypatch.setattr(compare_circuit_widget, "compared_circuit", broken_lens)
    box.threshold.value = 0.05
    assert widget.errors.message == "RuntimeError: no lens" and widget.figures["circuit_first"] is None
    failing_lenses(widget, monkeypatch)
    box.show.value = False
    assert widget.errors.message == ""


def test_a_compare_run_keeps_its_maps_error_and_a_picked_head_or_ticked_box_clears_one(
    translator: attnlab.decode.Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's maps that failed were said and then wiped by the readings drawn after them (each of
    the two parts cleared the line); a head picked or a box ticked clears the last action's error."""
    widget = widgets.compare_models(translator, text=SENTENCE)
    monkeypatch.setattr(compare_widget.viz, "compare_figures", broken_lens)
    widget.run()
    assert widget.errors.message == "RuntimeError: no lens"
    monkeypatch.undo()
    heads = [value for _label, value in widget.picker.head.options]
    for act in (
        lambda: widget.show_rollouts.set_trait("value", True),
        lambda: widget.picker.head.set_trait("value", next(h for h in heads if h != widget.picker.head.value)),
        lambda: widget.show_importances.set_trait("value", True),
    ):
        failing_lenses(widget, monkeypatch)
        monkeypatch.undo()  # (the lenses work again: ticking the importances redraws them too)
        act()
        assert widget.errors.message == "" and widget.figures["first"] is not None
        widget.show_lenses.value = False
