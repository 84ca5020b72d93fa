"""Two models side by side: the comparison of a model with itself with heads switched off, the
difference map, models of different sizes, and the notebook widget."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pytest
from attnlab.widgets import compare_models
from bokeh.models import LinearColorMapper

import attnlab
from attnlab import viz
from attnlab.decode.compare import compare
from attnlab.errors import AttnlabError
from attnlab.record.saliency import saliency

ROOT = Path(__file__).resolve().parents[1]
TRANSLATOR, PARSER = ROOT / "checkpoints" / "multi30k-en-de", ROOT / "checkpoints" / "wsj-parser"
TEXT = "A man in a blue shirt is riding a bike down the street."
OFF = {("cross", 1): [0, 1, 2, 3], ("cross", 2): [0, 1, 2, 3]}

pytestmark = pytest.mark.skipif(not (TRANSLATOR / "manifest.json").is_file(), reason="no bundled translator")


def test_a_model_against_itself_with_heads_off() -> None:
    model = attnlab.load(TRANSLATOR)
    same = compare(model, model, TEXT)
    assert same.same_output and same.first.text == same.second.text
    np.testing.assert_allclose(
        same.second_on_first.trace.attention("cross", -1), same.first.trace.attention("cross", -1), atol=1e-6
    )
    off = compare(model, model, TEXT, heads_off=OFF)
    assert not off.same_output  # the encoder-decoder heads of two layers carry the translation
    assert off.second_on_first.trace.tgt_tokens == off.first.trace.tgt_tokens  # read on A's output: maps line up
    first, second, difference = viz.compare_figures(off.first.trace, off.second_on_first.trace, "encoder", 0, 1)
    assert (first.name, second.name, difference.name) == ("compare-first", "compare-second", "compare-diff")
    assert first.width == second.width == difference.width  # cells of one size, to line up (the short A − B title)
    # an ablated head still attends (its output is zeroed): its own map says so, under its model's layer
    assert off.second_on_first.trace.meta["heads_off"] == [["cross", layer, h] for layer in (1, 2) for h in range(4)]
    assert "heads_off" not in off.first.trace.meta and "heads_off" not in same.second_on_first.trace.meta
    maps = viz.compare_figures(off.first.trace, off.second_on_first.trace, "cross", -1, 1)
    assert [" ".join(f.title.text.split()) for f in maps[:2]] == [
        "A · encoder–decoder attention · layer 2 · head 1",
        "B · encoder–decoder attention · layer 2 · head 1 · switched off (its output zeroed)",
    ]
    # a long title wraps rather than widening the maps: in Spanish they were 1,042 px, past a 1,280 px window
    from attnlab.app.words import figure_words

    spanish = viz.compare_figures(off.first.trace, off.second_on_first.trace, "cross", -1, 1, words=figure_words("es"))
    assert "\n" in spanish[1].title.text and max(f.width for f in spanish) < 640
    assert viz.heatmap(off.second_on_first.trace, "cross", 0, 3).title.text.endswith(" · head 3")  # layer 0 was on
    assert viz.heatmap(off.second_on_first.trace, "cross", 1, 3).title.text.endswith("switched off (its output zeroed)")
    # heads off in the decoder's cross-attention change what the decoder's self-attention does too
    moved = off.first.trace.attention("decoder", -1) - off.second_on_first.trace.attention("decoder", -1)
    assert np.abs(moved).max() > 0.05
    assert "<del>" in viz.word_diff(off.first.text, off.second.text)


def test_the_second_model_reads_the_first_ones_pieces_not_its_text_encoded_again() -> None:
    """The Chinese model produced 我|有空|了|！ for "I'm free!"; its text encoded again is
    我有|空|了|！, which the second model was teacher-forced on: a model compared with itself
    showed maps 0.7 apart and log P −7.9 against −3.1."""
    checkpoint = ROOT / "checkpoints" / "tatoeba-en-zh"
    if not (checkpoint / "manifest.json").is_file():
        pytest.skip("no bundled Chinese translator")
    model = attnlab.load(checkpoint)
    same = compare(model, model, "I'm free!")
    assert model.target_tokenizer.encode(same.first.text, out_type=str) != same.first.tokens[:-1]  # or it shows nothing
    assert same.second_on_first.tokens == same.first.tokens and same.second_on_first.text == same.first.text
    assert same.second_on_first.logprob == pytest.approx(same.first.logprob, abs=1e-4)
    np.testing.assert_allclose(
        same.second_on_first.trace.attention("cross", -1), same.first.trace.attention("cross", -1), atol=1e-5
    )
    with pytest.raises(AttnlabError, match="pieces this model lacks"):
        attnlab.load(TRANSLATOR).score("I'm free!", same.first)


def test_models_of_different_sizes_show_what_each_has(tmp_path: Path) -> None:
    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.model.config import preset
    from attnlab.model.transformer import Transformer

    small = Transformer(preset("small", n_layers=1, n_heads=2, vocab_size=8000))
    save_checkpoint(tmp_path / "one-layer", small, TRANSLATOR / "spm.model")
    model, tiny = attnlab.load(TRANSLATOR), attnlab.load(tmp_path / "one-layer")
    result = compare(model, tiny, TEXT)
    figures = viz.compare_figures(result.first.trace, result.second_on_first.trace, "cross", 2, 3)
    assert [f.name for f in figures] == ["compare-first", "compare-note-second", "compare-note-diff"]
    assert "(N = 1, h = 2)" in figures[1].text  # Table 3's names: no "1 layers"
    assert [f.name for f in viz.compare_figures(result.first.trace, result.second_on_first.trace, "cross", 0, 1)] == [
        "compare-first",
        "compare-second",
        "compare-diff",
    ]


def shares(figure: object) -> np.ndarray:
    """A direct logit attribution grid's cells, in the order the figure lays them out."""
    return np.asarray(figure.select_one({"name": "cells"}).data_source.data["value"])


def expected_shares(attribution: object, position: int) -> np.ndarray:
    """Every decoder self-attention head, encoder–decoder head and feed-forward layer's share at
    `position`, in the grid's order (by head within a layer, then the feed-forward column)."""
    p = position
    return np.concatenate(
        [attribution.self_heads[:, :, p].ravel(), attribution.cross_heads[:, :, p].ravel(), attribution.ffn[:, p]]
    )


def against_one_layer(tmp_path: Path) -> object:
    """An explorer on the bundled translator, its Compare tab open against a random one-layer,
    two-head model of the same vocabulary (saved under `tmp_path`)."""
    from attnlab.app.explorer import Explorer
    from attnlab.app.roots import CheckpointRoots
    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.model.config import preset
    from attnlab.model.transformer import Transformer

    small = Transformer(preset("small", n_layers=1, n_heads=2, vocab_size=8000)).eval()
    save_checkpoint(tmp_path / "one-layer", small, TRANSLATOR / "spm.model")
    shown = Explorer({"de": str(TRANSLATOR), "small": str(tmp_path / "one-layer")}, CheckpointRoots([tmp_path]))
    shown.open_listed("de")
    shown.tabs.active = 5
    shown.compare.second.value = "small"
    return shown


def ticked(tmp_path: Path, box_name: str) -> tuple[object, object, object, tuple]:
    """`against_one_layer`'s explorer with the Compare tab's box `box_name` ticked (nothing was
    read before): (explorer, tab, box, both (model, trace) sides of the output compared)."""
    shown = against_one_layer(tmp_path)
    tab = shown.compare
    box = getattr(tab, box_name)
    assert tab.comparison is not None and all(p.object is None for p in box.panes)  # unticked: not read
    box.show.value = True
    c = tab.comparison
    return shown, tab, box, ((shown.store.model, c.first.trace), (tab.second_model, c.second_on_first.trace))


def test_the_compare_tab_shows_who_wrote_each_piece_in_both_models(tmp_path: Path) -> None:
    """Its fifth box, once ticked, draws each model's direct logit attribution grid for the piece
    chosen (the second model read on the first one's output, each with the heads it has), with a
    line each of the other shares summed to that model's logit; another piece redraws, another
    head does not, and unticked nothing is drawn."""
    from attnlab.app.attribution_text import parts_line

    shown, tab, box, sides = ticked(tmp_path, "attributions")
    read = [attnlab.logit_attribution(model, trace) for model, trace in sides]
    assert read[0].produced == read[1].produced and list(box.position.options.values()) == list(
        range(len(read[0].produced))
    )
    for position in (box.position.value, 1):
        box.position.value = position
        first, second = (p.object for p in box.panes)
        assert (first.name, second.name) == ("compare-attribution-first", "compare-attribution-second")
        for figure, attribution, name in zip((first, second), read, ("A", "B"), strict=True):
            np.testing.assert_allclose(shares(figure), expected_shares(attribution, position))
            assert figure.title.text.startswith(f"{name} · ")
            assert parts_line(attribution, position, "en").replace("'", "&#x27;") in box.lines.object
        ends = [f.select_one({"type": LinearColorMapper}).high for f in (first, second)]  # one scale for both
        assert ends[0] == ends[1] == pytest.approx(max(np.abs(expected_shares(a, position)).max() for a in read))
    assert len(shares(second)) == 2 + 2 + 1 and len(shares(first)) == 2 * 3 * 4 + 3  # each its own grid
    shown.store.head = 2  # another head: the readings stay as they were
    assert box.panes[0].object is first and not tab.notice.visible
    box.show.value = False
    assert all(p.object is None for p in box.panes) and not box.controls.visible


def test_the_compare_tab_draws_both_models_circuits(tmp_path: Path) -> None:
    """Its sixth box, once ticked, draws each model's circuit for the sentence typed in the Head
    ablation tab (the second model read on the first one's output), redrawn when that sentence or
    its direction changes; unticked nothing is drawn, and what the library refuses (nothing typed,
    no difference) is one line in the tab's notice, with no figure."""
    import html

    from attnlab.app.explorer import Explorer
    from attnlab.app.i18n import text
    from attnlab.app.roots import CheckpointRoots
    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.model.config import preset
    from attnlab.model.transformer import Transformer
    from attnlab.record.circuit import trace_circuit

    small = Transformer(preset("small", n_layers=1, n_heads=2, vocab_size=8000)).eval()
    save_checkpoint(tmp_path / "one-layer", small, TRANSLATOR / "spm.model")
    shown = Explorer({"de": str(TRANSLATOR), "small": str(tmp_path / "one-layer")}, CheckpointRoots([tmp_path]))
    shown.open_listed("de")
    shown.tabs.active = 5
    tab, box, typed = shown.compare, shown.compare.circuits, shown.ablation.patching.corrupted
    tab.second.value = "small"
    box.show.value = True  # nothing typed yet
    assert all(p.object is None for p in box.panes) and text("compare.patch_none") in html.unescape(tab.notice.object)
    c = tab.comparison
    sides = ((shown.store.model, c.first.trace), (tab.second_model, c.second_on_first.trace))

    def tips(fig: object) -> list[str]:
        return list(fig.select_one({"name": "paths"}).data_source.data["tip"])

    changed = shown.store.text.replace("girl", "boy")
    assert changed != shown.store.text  # or the test shows nothing
    for direction in ("denoise", "noise"):  # typed there (as a browser sends it), then the direction: redrawn here
        typed.value_input = typed.value = changed
        shown.ablation.patching.direction.value = direction
        drawn = []
        for pane, (model, trace), name, role in zip(box.panes, sides, ("A", "B"), ("first", "second"), strict=True):
            fig = pane.object
            assert fig.name == f"compare-circuit-{role}" and fig.title.text.startswith(f"{name} · ")
            assert tips(fig) == tips(viz.circuit_figure(trace_circuit(model, trace, changed, direction=direction)))
            assert fig.sizing_mode == "stretch_width"  # narrows with the window
            drawn.append(tips(fig))
        assert not tab.notice.visible  # (noising: no one head of the trained model moves 0.05, no path)
        assert direction == "noise" or drawn[0] and drawn[0] != drawn[1]  # two models, two circuits
    box.show.value = False
    assert all(p.object is None for p in box.panes) and not tab.notice.visible
    typed.value_input = typed.value = shown.store.text  # no difference: one line, no figure
    assert all(p.object is None for p in box.panes)  # (unticked: not drawn)
    box.show.value = True
    assert all(p.object is None for p in box.panes) and "no difference" in box.refused
    assert tab.notice.visible and html.unescape(tab.notice.object).count(box.refused) == 1
    assert tab.comparison is not None and tab.panes[0].object is not None  # the rest of the tab still shows


def test_the_notebook_widget_shows_who_wrote_each_piece_in_both_models() -> None:
    """The same box in `compare_models`: the second model with heads off is read with them off;
    another piece redraws; the runner-up contrast reads both models again."""
    widget = compare_models(str(TRANSLATOR), text=TEXT, heads_off=OFF)
    assert widget.figures["attribution_first"] is None and widget.figures["attribution_second"] is None
    widget.attributions.show.value = True
    c = widget.comparison
    sides = ((c.first.trace, "first"), (c.second_on_first.trace, "second"))
    for against in ("mean", "runner-up"):
        widget.attributions.against.value = against
        for position in (widget.attributions.position.value, 2):
            widget.attributions.position.value = position
            for trace, role in sides:
                figure = widget.figures[f"attribution_{role}"]
                assert figure.name == f"compare-attribution-{role}"
                expected = attnlab.logit_attribution(widget.first, trace, against)
                np.testing.assert_allclose(shares(figure), expected_shares(expected, position))
    first, second = (shares(widget.figures[f"attribution_{role}"]).reshape(-1) for role in ("first", "second"))
    assert not np.allclose(first, second) and not widget.errors.message  # heads off: another reading
    assert widget.figures["attribution_second"].title.text.startswith("heads off · ")
    widget.attributions.show.value = False
    assert widget.figures["attribution_first"] is None


def source_shares(figure: object) -> np.ndarray:
    """A saliency map's source block, its rows in the output's order."""
    return np.asarray(figure.select_one({"name": "cells-source"}).data_source.data["image"][0])[::-1]


def expected_source_shares(read: object) -> np.ndarray:
    magnitude = [np.abs(read.source_scores.astype(np.float64)), np.abs(read.target_scores.astype(np.float64))]
    return magnitude[0] / (magnitude[0].sum(1, keepdims=True) + magnitude[1].sum(1, keepdims=True))


def test_the_compare_tab_shows_which_inputs_each_piece_depends_on_in_both_models(tmp_path: Path) -> None:
    """Its seventh box, once ticked, draws each model's saliency map (the second model read on the
    first one's output, so the rows are the same pieces) on one colour scale, with each model's
    line; read once per comparison (another head reads nothing), unticked nothing is drawn, and
    what the library refuses is one line in the tab's notice."""
    from attnlab.app.words import saliency_line

    shown, tab, box, sides = ticked(tmp_path, "saliency")
    read = [saliency(model, trace) for model, trace in sides]
    first, second = (p.object for p in box.panes)
    assert (first.name, second.name) == ("compare-saliency-first", "compare-saliency-second")
    for figure, found, name in zip((first, second), read, ("A", "B"), strict=True):
        np.testing.assert_allclose(source_shares(figure), expected_source_shares(found), atol=1e-6)
        assert figure.title.text.startswith(f"{name} · ")
        assert html.escape(saliency_line(found, "en")) in box.lines.object
    assert not np.allclose(expected_source_shares(read[0]), expected_source_shares(read[1]))  # two models
    ends = [f.select_one({"type": LinearColorMapper}).high for f in (first, second)]  # one scale for both
    assert ends[0] == ends[1] == pytest.approx(max(viz.saliency_scale(r) for r in read))
    shown.store.head = 2  # another head: nothing is read again
    assert box.panes[0].object is first and not tab.notice.visible
    box.show.value = False
    assert all(p.object is None for p in box.panes)
    shown.store.model.model.train()  # (saliency reads a model in eval mode only): refused in one line
    try:
        box.compare(box.sides, box.names)
        box.show.value = True
    finally:
        shown.store.model.model.eval()
    assert all(p.object is None for p in box.panes) and box.refused and "\n" not in box.refused
    assert tab.notice.visible and box.refused in html.unescape(tab.notice.object)


def test_the_notebook_widget_shows_which_inputs_each_piece_depends_on_in_both_models() -> None:
    """The same box in `compare_models`: the second model with heads off is read with them off."""
    widget = compare_models(str(TRANSLATOR), text=TEXT, heads_off=OFF)
    assert widget.figures["saliency_first"] is None and widget.figures["saliency_second"] is None
    widget.saliency.show.value = True
    c = widget.comparison
    for trace, role in ((c.first.trace, "first"), (c.second_on_first.trace, "second")):
        figure = widget.figures[f"saliency_{role}"]
        assert figure.name == f"compare-saliency-{role}"
        expected = saliency(widget.first, trace)
        np.testing.assert_allclose(source_shares(figure), expected_source_shares(expected), atol=1e-6)
    first, second = (source_shares(widget.figures[f"saliency_{role}"]) for role in ("first", "second"))
    assert not np.allclose(first, second) and not widget.errors.message  # heads off: another reading
    assert widget.figures["saliency_second"].title.text.startswith("heads off · ")
    widget.saliency.show.value = False
    assert widget.figures["saliency_first"] is None


def test_a_translator_and_a_parser_are_not_compared() -> None:
    if not (PARSER / "manifest.json").is_file():
        pytest.skip("no bundled parser")
    with pytest.raises(AttnlabError, match="cannot compare a translate model with a parse model"):
        compare(attnlab.load(TRANSLATOR), attnlab.load(PARSER), TEXT)


def test_models_or_traces_of_another_vocabulary_are_refused() -> None:
    """Once the Spanish model was teacher-forced on the German output (read as <unk>s and odd
    pieces) and its maps drawn as "B read on A's output"; Eq. (1) step by step and the ablation
    view likewise read another model's trace."""
    spanish_dir = ROOT / "checkpoints" / "tatoeba-en-es"
    if not (spanish_dir / "manifest.json").is_file():
        pytest.skip("no bundled Spanish model")
    from attnlab.decode.ablation import ablation
    from attnlab.record.equation import attention_parts

    german, spanish = attnlab.load(TRANSLATOR), attnlab.load(spanish_dir)
    with pytest.raises(AttnlabError, match="different vocabularies"):
        compare(german, spanish, TEXT)
    trace = spanish.translate("I like tea.", record=True).trace
    with pytest.raises(AttnlabError, match="recorded by another model"):
        attention_parts(german, trace, "cross", 0, 0)
    with pytest.raises(AttnlabError, match="recorded by another model"):
        ablation(german, trace, {("cross", 0): [0]})
    own = german.translate(TEXT, record=True).trace  # its own trace, <unk>-free or not, still reads
    assert attention_parts(german, own, "cross", 0, 0)["weights"].shape == own.attention("cross", 0)[0].shape


def test_the_notebook_widget_compares() -> None:
    widget = compare_models(str(TRANSLATOR), heads_off=OFF)
    assert widget.comparison is not None and "<del>" in widget.output.value
    shown = [f.name for f in widget.figures.values() if f is not None]  # (the rollouts and lenses: unticked)
    assert shown == ["compare-first", "compare-second", "compare-diff"]
    widget.picker.select(kind="encoder", layer=0, head=2)
    assert widget.figures["first"].name == "compare-first" and "layer 0 · head 2" in widget.figures["first"].title.text


def test_the_notebook_widget_patches_both_models() -> None:
    """`patch` draws each model's residual stream patched against a changed sentence, the second on
    the first one's output with its heads off kept off: with the cross heads of layers 1 and 2 off,
    only the first layer's read the encoder, and the top encoder layer's state at "man" restores
    0.51 of the change in B against 0.99 in A. Nothing typed, or a change that moves nothing, is
    one line, and the other readings stay drawn."""
    from attnlab.record.residual import trace_residual_patching

    widget = compare_models(str(TRANSLATOR), text=TEXT, heads_off=OFF)
    widget.show_lenses.value = True
    widget.show_patchings.value = True  # nothing typed yet: no error (it sent the reader to the explorer's tab)
    assert not widget.errors.message and widget.figures["patching_first"] is None
    assert "Type the sentence with a change in the box above" in widget.changed_hint.value
    assert widget.figures["lens_first"] is not None
    changed = TEXT.replace(" man ", " woman ")
    widget.patch(changed)
    assert widget.changed_hint.value == ""
    c, grids = widget.comparison, []
    for role, side in (("first", c.first), ("second", c.second_on_first)):
        expected = trace_residual_patching(widget.first, side.trace, changed)
        grids.append(widget.figures[f"patching_{role}"].select_one({"name": "cells"}).data_source.data["value"])
        np.testing.assert_allclose(grids[-1], expected.encoder.ravel())
    assert not widget.errors.message and not np.allclose(*grids)
    assert grids[0].reshape(4, -1)[-1, 1] > grids[1].reshape(4, -1)[-1, 1]  # (top row, "man")
    widget.patch(TEXT, method="attribution")
    assert "changes the target's log-probability by only" in widget.errors.message
    assert widget.figures["patching_first"] is None and widget.figures["lens_first"] is not None
    widget.changed.value = changed  # typed in its box and Enter (nothing listened to the box)
    assert widget.figures["patching_first"] is not None and not widget.errors.message
    widget.run("Two dogs run in the snow .")  # another sentence: the change typed for the last one goes
    assert widget.changed.value == "" and widget.figures["patching_first"] is None  # (it patched "Two dogs" with it)
    # one width, so that their cells line up: B's longer title made its lens 590 px wide, A's 558
    lenses = widget.figures["lens_first"], widget.figures["lens_second"]
    assert lenses[0].width == lenses[1].width and lenses[0].max_width == lenses[1].max_width
    assert "read on the output of all heads" in lenses[1].title.text.replace("\n", " ")  # not "all heads's output"


def test_the_notebook_widget_draws_both_models_circuits() -> None:
    """Its circuit box, once ticked, draws each model's circuit for the sentence given to `patch`
    (the second with its heads off kept off), and again for another sentence or direction; nothing
    while unticked, and a change that moves nothing is one line with no figure."""
    from attnlab.record.circuit import trace_circuit

    def tips(fig: object) -> list[str]:
        return list(fig.select_one({"name": "paths"}).data_source.data["tip"])

    widget = compare_models(str(TRANSLATOR), text=TEXT, heads_off=OFF)
    changed = TEXT.replace(" man ", " woman ")
    widget.patch(changed)
    assert widget.figures["circuit_first"] is None and widget.figures["patching_first"] is not None  # unticked
    widget.changed.value = ""
    widget.circuits.show.value = True  # with no changed sentence: no error, the hint asks for one
    assert not widget.errors.message and widget.figures["circuit_first"] is None and widget.changed_hint.value
    widget.show_patchings.value = False
    widget.circuits.threshold.value = widget.circuits.threshold.options[-1][1]  # (a menu redrew the error)
    assert not widget.errors.message and widget.changed_hint.value
    widget.circuits.threshold.value = 0.05  # (the menu's first value, which `expected` below keeps)
    c = widget.comparison
    for direction in ("denoise", "noise"):
        widget.patch(changed, direction=direction)
        drawn = []
        for role, side, name in (("first", c.first, "all heads"), ("second", c.second_on_first, "heads off")):
            fig = widget.figures[f"circuit_{role}"]
            assert fig.name == f"compare-circuit-{role}" and fig.title.text.startswith(f"{name}")
            expected = viz.circuit_figure(trace_circuit(widget.first, side.trace, changed, direction=direction))
            assert tips(fig) == tips(expected)
            drawn.append(tips(fig))
        assert not widget.errors.message and (direction == "noise" or drawn[0] and drawn[0] != drawn[1])
    widget.patch(TEXT)  # no difference: one line, no circuit
    assert "no difference" in widget.errors.message and widget.figures["circuit_first"] is None
    widget.circuits.show.value = False
    assert widget.figures["circuit_first"] is None and widget.figures["circuit_second"] is None


def test_chinese_outputs_are_diffed_by_character() -> None:
    """As one space-less "word", a Chinese sentence with one character added was marked all
    removed and all added."""
    assert viz.word_diff("我喜欢早上喝茶。", "我喜欢在早上喝茶。") == "我喜欢<ins>在</ins>早上喝茶。"
    assert viz.word_diff("我和cac 40。", "我和cac 41。") == "我和cac <del>40</del><ins>41</ins>。"
    # a text's spaces are shown as it has them, and a space that differs is a change
    assert viz.word_diff("很大, 不是吗?", "很大,不是吗?") == "很大,<del> </del>不是吗?"
    assert viz.word_diff("Tom 和 Mary 去了。", "Tom 和 Marie 去了。") == "Tom 和 <del>Mary</del><ins>Marie</ins> 去了。"
    assert viz.word_diff("A dog runs .", "A cat runs .") == "A <del>dog</del><ins>cat</ins> runs ."
    assert (
        viz.word_diff("Die Katze schläft.", "Die Katze schläft auf dem Sofa.")
        == "Die Katze schläft<ins> auf dem Sofa</ins>."
    )


def test_a_restricted_models_trace_is_recomputed_and_masked_as_restricted() -> None:
    """Eq. (1) step by step with another model than the one that recorded the trace came out up
    to 0.85 from the map shown, with no word; the mask's title called r = 3's band a padding
    mask and a causal one."""
    from attnlab.record.equation import attention_parts
    from attnlab.viz.equation import mask_figure

    restricted = ROOT / "checkpoints" / "multi30k-en-de-r3"
    if not (restricted / "manifest.json").is_file():
        pytest.skip("no bundled restricted translator")
    local = attnlab.load(restricted)
    trace = local.translate(TEXT, record=True).trace
    assert attention_parts(local, trace, "encoder", 0, 0)["weights"].shape == trace.attention("encoder", 0)[0].shape
    with pytest.raises(AttnlabError, match="recorded by another model"):
        attention_parts(attnlab.load(TRANSLATOR), trace, "encoder", 0, 0)
    assert mask_figure(trace, "encoder").title.text.endswith("(one sentence: nothing padded) · |i − j| ≤ 3")
    assert mask_figure(trace, "decoder").title.text.endswith("· i − j ≤ 3")


def test_rollouts_compare_a_restricted_model_with_a_global_one() -> None:
    """The rollouts of the global model and the r = 3 one, up to the same layer, and their
    difference: the restricted rollout is zero beyond r(l+1) positions (Table 1's longer path),
    which the difference shows as the global one's own share there."""
    restricted = ROOT / "checkpoints" / "multi30k-en-de-r3"
    if not (restricted / "manifest.json").is_file():
        pytest.skip("no bundled restricted translator")
    result = compare(attnlab.load(TRANSLATOR), attnlab.load(restricted), TEXT)
    first, second = result.first.trace, result.second_on_first.trace
    figures = viz.compare_rollouts(first, second, "encoder", 0, names=("global", "r3"))
    assert [f.name for f in figures] == ["compare-rollout-first", "compare-rollout-second", "compare-rollout-diff"]
    assert len({f.width for f in figures}) == 1
    assert figures[1].title.text == "r3 · attention rollout · encoder self-attention · up to layer 0"
    image = figures[2].select_one({"name": "cells"}).data_source.data["image"][0][::-1]
    np.testing.assert_allclose(
        image, attnlab.rollout(first, "encoder")[0] - attnlab.rollout(second, "encoder")[0], atol=1e-6
    )
    far = np.abs(np.subtract.outer(np.arange(image.shape[0]), np.arange(image.shape[1]))) > 3
    assert (attnlab.rollout(second, "encoder")[0][far] == 0).all() and (image[far] > 0).any()
    assert figures[2].title.text == "global − r3 · attention rollout up to layer 0"
    # both rollouts on one colour scale (0-0.6 and 0-0.7 side by side), the difference named as they are
    tops = [f.select_one({"name": "cells"}).glyph.color_mapper.high for f in figures[:2]]
    assert tops[0] == tops[1] == max(attnlab.rollout(t, "encoder")[0].max() for t in (first, second))
    assert (figures[2].xaxis[0].axis_label, figures[2].yaxis[0].axis_label) == (
        figures[0].xaxis[0].axis_label,
        figures[0].yaxis[0].axis_label,
    )


def test_rollouts_of_models_of_different_sizes_say_what_is_missing(tmp_path: Path) -> None:
    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.model.config import preset
    from attnlab.model.transformer import Transformer

    save_checkpoint(
        tmp_path / "one-layer", Transformer(preset("small", n_layers=1, vocab_size=8000)), TRANSLATOR / "spm.model"
    )
    result = compare(attnlab.load(TRANSLATOR), attnlab.load(tmp_path / "one-layer"), TEXT)
    figures = viz.compare_rollouts(result.first.trace, result.second_on_first.trace, "cross", 2)
    assert [f.name for f in figures] == ["compare-rollout-first", "compare-note-second", "compare-note-diff"]
    assert "B has no cross layer 2 (N = 1)" in figures[1].text
    with pytest.raises(AttnlabError, match="^names are two strings"):
        viz.compare_rollouts(result.first.trace, result.second_on_first.trace, "cross", 0, names=("A",))


def test_the_notebook_widget_names_the_characters_the_vocabulary_lacks() -> None:
    """As `explore()` does: Chinese typed into the EN→DE model is read as UTF-8 byte pieces, and
    the output (with "�" where those bytes do not make a character) said nothing of it."""
    from attnlab.app.i18n import text

    widget = compare_models(str(TRANSLATOR), text="一个男人 rides a bike .", heads_off=OFF)
    assert text("widgets.unknown", characters="一 个 男 人") in widget.output.value
    widget.run(TEXT)
    assert text("widgets.unknown", characters="§").split("§")[0] not in widget.output.value


def test_a_head_neither_trace_holds_or_no_model_to_compare_is_one_line() -> None:
    """A kind "foo", a layer "0" or 99 in both traces drew two notes blaming the models ("A has no
    cross layer 0 ...", "the two models differ in size") for the same trace twice; `compare` of
    None was an AttributeError."""
    model = attnlab.load(TRANSLATOR)
    trace = model.translate(TEXT, record=True).trace
    for kind, layer, said in (("foo", 0, "unknown attention kind 'foo'"), ("cross", "0", "a layer is a whole number")):
        with pytest.raises(AttnlabError, match=f"^{said}"):
            viz.compare_figures(trace, trace, kind, layer, 0)
        with pytest.raises(AttnlabError, match=f"^{said}"):
            viz.compare_rollouts(trace, trace, kind, layer)
    with pytest.raises(AttnlabError, match="^layer 99 of cross attention was not recorded"):
        viz.compare_figures(trace, trace, "cross", 99, 0)
    with pytest.raises(AttnlabError, match="^head 9 does not exist in this trace"):
        viz.compare_figures(trace, trace, "cross", 0, 9)
    with pytest.raises(AttnlabError, match="^compare needs a model from attnlab.load"):
        compare(model, None, TEXT)


def test_the_picker_offers_every_model_but_the_open_one(tmp_path: Path) -> None:
    """The open model against itself compares two copies of one output; its picker entry goes, and
    comes back once another model is open (a choice that became the open model is cleared)."""
    shown = against_one_layer(tmp_path)
    tab = shown.compare
    assert "small" in tab.second.options.values() and "de" not in tab.second.options.values()
    shown.open_listed("small")
    tab.draw()
    assert "de" in tab.second.options.values() and "small" not in tab.second.options.values()
    assert tab.second.value == ""  # (`compare.NONE`): not the model now open


def hidden(figure: object) -> tuple[int, float]:
    """(cells hatched as masked, the largest |value| under the hatch) of a map."""
    from bokeh.models import HoverTool

    blocked = figure.select_one({"type": HoverTool}).formatters["@image"].args["blocked"]
    image = np.asarray(figure.select_one({"name": "cells"}).data_source.data["image"][0])[::-1]
    return len(blocked), float(np.abs(image.ravel()[blocked]).max(initial=0.0))


def test_a_restricted_model_first_hides_nothing_under_its_band() -> None:
    """With r3 as A, its band hatched the decoder's rollouts (which reach r(l+1) back: shares of
    up to 0.08 said "weight 0") and the A − B maps, over the global model's weights (0.98 said
    "weight 0"). A rollout is hatched where no position reaches (later ones), a difference where
    both models forbid attending."""
    restricted = ROOT / "checkpoints" / "multi30k-en-de-r3"
    if not (restricted / "manifest.json").is_file():
        pytest.skip("no bundled restricted translator")
    result = compare(attnlab.load(restricted), attnlab.load(TRANSLATOR), TEXT)
    first, second = result.first.trace, result.second_on_first.trace
    n = len(first.tgt_tokens)
    causal = n * (n - 1) // 2  # the cells above the diagonal
    for figure in viz.compare_rollouts(first, second, "decoder", -1, names=("r3", "global")):
        assert hidden(figure) == (causal, 0.0), figure.name
    assert hidden(viz.rollout_figure(first, "decoder"))[1] == 0.0
    for kind, forbidden in (("encoder", 0), ("decoder", causal)):
        diff = viz.compare_figures(first, second, kind, 0, 0, names=("r3", "global"))[2]
        assert hidden(diff) == (forbidden, 0.0), kind
        assert hidden(viz.compare_figures(first, second, kind, 0, 0)[0])[0] > forbidden  # (A's own map: its band)


def test_compare_is_a_name_of_the_package() -> None:
    """`attnlab.compare` was an AttributeError, where `attnlab.rollout` and `attnlab.head_stats`
    are names of the package: the comparison is one too."""
    assert attnlab.compare is compare and "compare" in attnlab.__all__
