"""What a visitor does to the explorer's views, driven through its Python objects (as a browser's
events reach them) on random-weight tiny models: each test is one thing a user did that once
showed a traceback or a silently wrong result -- a kind chosen with its buttons, a corpus
sentence of another model, an ablation beside a reference, a parser's reference, a failed decode
after a truncated one, heads picked before the model changed.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import panel as pn
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from bokeh.models import LinearColorMapper
from test_notebooks import make_checkpoints

from attnlab.app.explorer import Explorer
from attnlab.app.explorer import ablation as ablation_tab
from attnlab.app.i18n import text
from attnlab.app.roots import CheckpointRoots
from attnlab.data.treebank import leaves, parse_tree
from attnlab.decode.loading import load
from attnlab.decode.profile import profile, write_profile
from attnlab.model.checkpoint import weights_digest
from attnlab.record.stats import head_pattern
from attnlab.record.trace import AttentionTrace

SOURCES = ["the dog runs in the park .", "a girl sits on a red bike ."]
TREE = "(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A root ("lab") with the tiny translator, parser and restricted translator, and profiles of
    the translator: its own, one naming the parser, and one with layers the translator lacks."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster than two busy ones
    root = tmp_path_factory.mktemp("views") / "lab"
    paths = make_checkpoints(root)
    table = profile(load(paths["translate"]), SOURCES)
    write_profile(table, root / "profiles" / "own.parquet", {"checkpoint": "tiny-translator", "mode": "translate"})
    write_profile(table, root / "profiles" / "parser.parquet", {"checkpoint": "tiny-parser", "mode": "translate"})
    deeper = table.set_column(
        table.schema.get_field_index("layer"), "layer", pc.add(table["layer"], pa.scalar(4, pa.int16()))
    )
    write_profile(deeper, root / "profiles" / "deep.parquet", {"checkpoint": "tiny-translator", "mode": "translate"})
    # the translator's name, the restricted translator's weights: another run's checkpoint of the same name
    other = {"checkpoint": "tiny-translator", "mode": "translate", "model_sha256": weights_digest(paths["restricted"])}
    write_profile(table, root / "profiles" / "same-name.parquet", other)
    yield {**paths, "root": root}
    torch.set_num_threads(threads)


def explorer(lab: dict[str, Path], **checkpoints: str) -> Explorer:
    """An explorer on the lab's root with `checkpoints` ({name: lab key}) in its picker, the
    first one open and its example decoded."""
    shown = Explorer({name: str(lab[key]) for name, key in checkpoints.items()}, CheckpointRoots([lab["root"]]))
    shown.open_listed(next(iter(checkpoints)))
    assert shown.store.trace is not None and not shown.store.error, shown.store.error
    return shown


def decode(shown: Explorer, source: str, reference: str = "") -> None:
    """Type the boxes and press the button, as a visitor does."""
    shown.text_input.value, shown.reference_input.value = source, reference
    shown.translate()


def test_kind_buttons_offer_that_kinds_layers_and_queries(lab: dict[str, Path]) -> None:
    """The kind buttons set `store.kind` directly; the query menu of Eq. (1) then lists the new
    kind's queries, and the last of them is a choice the store accepts (it raised ValueError)."""
    shown = explorer(lab, tiny="translate")
    store, trace = shown.store, shown.store.trace
    assert len(trace.labels("encoder")[0]) != len(trace.labels("cross")[0])  # or the test shows nothing
    shown.tabs.active = 1  # Masks & Eq. (1): the query menu is drawn
    for kind in ("encoder", "cross", "decoder", "encoder"):
        shown.selection.kind.value = kind
        queries = list(range(len(trace.labels(kind)[0])))
        assert store.param.query.objects == queries and store.param.layer.objects == trace.layers[kind]
        assert list(shown.equation.query.options.values()) == queries
        shown.equation.query.value = queries[-1]
        assert store.query == queries[-1] and not store.error


def test_corpus_sentences_open_only_with_the_profiles_model(lab: dict[str, Path]) -> None:
    """A sentence of a profile recorded with another checkpoint, or with other layers, is refused
    in the error box and nothing is decoded or selected; the model's own profile opens."""
    shown = explorer(lab, tiny="translate")
    store, corpus = shown.store, shown.corpus
    config = store.model.config
    refusals = {
        "deep.parquet": (
            ("cross", 5, 1),
            text("corpus.other_heads", "en", name="lab/profiles/deep.parquet", loaded="tiny", layers=2, heads=4),
        ),
        "parser.parquet": (
            ("encoder", 1, 2),
            text(
                "corpus.other_model",
                "en",
                name="lab/profiles/parser.parquet",
                checkpoint="tiny-parser",
                loaded="tiny",
            ),
        ),
    }
    refusals["same-name.parquet"] = (
        ("encoder", 1, 2),
        text("corpus.other_weights", "en", name="lab/profiles/same-name.parquet", loaded="tiny"),
    )
    for name, (head, said) in refusals.items():
        run, selected = store.run, (store.kind, store.layer, store.head)
        assert corpus.open(f"profiles/{name}") and "translations" not in corpus.info.object
        corpus.pick(*head)
        corpus._clicked("indices", [], [0])
        assert store.errors["corpus"] == said and store.run == run and (store.kind, store.layer, store.head) == selected
    assert config.n_layers == 2 and config.n_heads == 4
    assert corpus.open("profiles/own.parquet")
    # one colour scale for the kinds' grids (with one each, one colour was another value in each)
    grids = [corpus.profile.grid(corpus.stat.value, kind)[1] for kind in corpus.profile.kinds]
    every = np.concatenate([g.ravel() for g in grids])
    scales = {(m.low, m.high) for m in (g.object.select_one(LinearColorMapper) for g in corpus.grids.objects)}
    assert scales == {(np.nanmin(every), np.nanmax(every))} and len({np.nanmax(g) for g in grids}) > 1
    corpus.pick("encoder", 1, 2)
    corpus._clicked("indices", [], [0])
    assert not store.error and not store.errors and store.text == corpus.rows[0]["source"]
    assert (store.kind, store.layer, store.head) == ("encoder", 1, 2)
    corpus.path_input.value = "profiles/parser.parquet"  # Enter in the box opens it, as "Open profile" does
    corpus.path_input.param.trigger("enter_pressed")
    assert corpus.profile_name == "lab/profiles/parser.parquet"
    assert corpus.open("profiles/own.parquet")
    # from the keyboard: the open head's button lists its sentences, the menu opens one
    store.select(kind="cross", layer=0, head=3)
    corpus.open_head.clicks += 1
    assert corpus.selected == ("cross", 0, 3) and list(corpus.sentence.options.values()) == [
        -1,
        *range(len(corpus.rows)),
    ]
    corpus.sentence.value = 1
    assert store.text == corpus.rows[1]["source"] and corpus.sentence.value == -1 and not store.errors
    corpus.pick("cross", 7, 0)  # a head the profile lacks (the page's model may be another): a line, the list stays
    assert store.errors["corpus"] == text(
        "corpus.no_head", "en", name="lab/profiles/own.parquet", head="encoder–decoder attention · L7 H0"
    )
    assert corpus.selected == ("cross", 0, 3)


def test_ablation_says_whether_the_models_own_output_changed(
    lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a reference, "changed" compares the re-decoded output with the model's own output
    (both decoded freely), not with the reference; the log-probabilities are said to be the
    reference's. Here the "ablation" switches nothing off, so nothing may be called changed."""
    real = ablation_tab.ablation
    monkeypatch.setattr(ablation_tab, "ablation", lambda model, trace, heads, **kw: real(model, trace, {}, **kw))
    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs .", "der hund läuft .")
    assert shown.store.scored.text != shown.store.result.text
    shown.ablation.add_open_head()
    shown.ablation.ablate()
    effect = shown.ablation.effect.objects[0].object
    assert text("ablation.verdict", "en", count=1, verdict=f"<b>{text('ablation.unchanged')}</b>") in effect
    assert "log P(reference)" in effect


def test_an_ablation_error_goes_when_an_ablation_succeeds(lab: dict[str, Path]) -> None:
    shown = explorer(lab, tiny="translate")
    shown.tabs.active = 4
    shown.ablation.ablate()  # no heads chosen
    assert shown.store.errors == {"ablation": text("ablation.none")} and shown.error.visible
    shown.ablation.add_open_head()
    shown.ablation.ablate()
    assert shown.store.errors == {} and not shown.error.visible and shown.ablation.effect.objects
    decode(shown, "   ")  # a decode's error is not the ablation's to take away
    shown.ablation.ablate()
    assert shown.store.error.endswith("The input is empty.")


def test_a_tabs_error_is_shown_while_that_tab_is_open(lab: dict[str, Path]) -> None:
    """A profile the Corpus tab refused stayed in the error box over every other tab, and so did an
    ablation's: a view's error is shown while its tab is open, comes back with the tab, and goes
    when that view next succeeds. A decode's error is the page's: shown on every tab."""
    shown = explorer(lab, tiny="translate")
    shown.tabs.active = 6
    assert not shown.corpus.open("")
    said = text("corpus.no_profile")
    assert shown.store.errors == {"corpus": said} and shown.error.visible and said in shown.error.object
    shown.tabs.active = 0
    assert not shown.error.visible  # the Heads tab has no error
    shown.tabs.active = 4
    shown.ablation.ablate()  # no heads chosen
    assert shown.error.visible and text("ablation.none") in shown.error.object and said not in shown.error.object
    shown.tabs.active = 6
    assert shown.error.visible and said in shown.error.object and text("ablation.none") not in shown.error.object
    assert shown.corpus.open("profiles/own.parquet") and not shown.error.visible
    decode(shown, "   ")
    for tab in (0, 4, 6):
        shown.tabs.active = tab
        assert "The input is empty." in shown.error.object and shown.error.visible


def narrowest(model: object) -> int:
    """The fewest pixels a figure, table or bokeh layout takes across: its width, or its `min_width`
    where it stretches with the window; a bokeh row its children side by side, or the widest of
    them where it wraps; a column its widest child."""
    from bokeh.models import Column, Row

    if isinstance(model, Row):
        widths = [narrowest(child) for child in model.children]
        return max(widths) if any("flex-wrap: wrap" in str(css) for css in model.stylesheets) else sum(widths)
    if isinstance(model, Column):
        return max(narrowest(child) for child in model.children)
    return model.min_width if model.sizing_mode == "stretch_width" else model.width


def test_every_view_fits_a_1024_px_window_and_is_as_wide_as_before_in_a_wider_one(lab: dict[str, Path]) -> None:
    """Beside the 350 px inputs a 1024 px window leaves 664 px inside the margins. The logit lens
    of 14 pieces was 1,006 px, the head importance and patching grids 746, Eq. (1)'s values beside
    its output 779, the dashboard's table 720 and the corpus's 980: the page scrolled sideways
    (1,053 to 1,356 px in Chromium). Each now narrows to fit -- a grid keeps its cells and drags
    the rest into view, a table scrolls inside its box, the output goes under the values -- and,
    where a window has room, is as wide as before (its `max_width` is its own width). A head's
    map and the rollout of a source of 20 or more pieces were ~710 px (the page 1,079 px in
    Chromium): they narrow too, the head's map also after it is redrawn in place for a new
    sentence (its widths follow its new size). The path part's circuit is 640 px for four heads
    a layer and 960 for eight: it narrows as well."""
    from dataclasses import replace

    import numpy as np

    from attnlab import viz
    from attnlab.app.explorer.circuit import fitted
    from attnlab.record.circuit import trace_circuit
    from attnlab.viz.cells import FIT_PX

    shown = explorer(lab, tiny="translate", restricted="restricted")
    decode(shown, "a girl sits on a bike .", "ein mädchen sitzt auf einem roten fahrrad im park mit dem hund .")
    for tab in range(9):  # every view drawn
        shown.tabs.active = tab
    shown.tabs.active = 4
    shown.ablation.patching.corrupted.value = "a boy sits on a red bike in the park ."
    shown.ablation.patching.paths.split.value = True  # path patching's grids too
    shown.ablation.patching.run()
    shown.tabs.active = 5
    shown.compare.second.value = "restricted"
    shown.compare.lenses.value = shown.compare.importances.value = shown.compare.circuits.show.value = True
    shown.tabs.active = 6
    assert shown.corpus.open("profiles/own.parquet")
    shown.corpus.pick("encoder", 1, 2)
    assert not shown.store.error and not shown.store.errors
    shown_objects = [pane.object for pane in shown.layout.select(pn.pane.Bokeh) if pane.object is not None]
    shown.tabs.active = 2  # the dashboard's table is in the page while its tab is open (`explorer/tables.py`)
    shown_objects += [pane.object for pane in shown.dashboard.layout.select(pn.pane.Bokeh) if pane.object is not None]
    shown.tabs.active = 6
    names = {obj.name for obj in shown_objects}
    wanted = {"logit-lens", "head-importance", "head-patching", "eq1", "stats-table", "profile-sentences"}
    assert wanted <= names and {"compare-lens-first", "residual-patching-decoder"} <= names, names
    assert {"compare-circuit-first", "compare-circuit-second"} <= names, names
    assert {"path-patching-direct", "path-patching-indirect", "path-patching-receivers", "circuit"} <= names, names
    lens = next(obj for obj in shown_objects if obj.name == "logit-lens")
    assert lens.x_range.bounds[1] >= 12 and lens.width > FIT_PX  # or the lens fits anyway
    assert {obj.name: narrowest(obj) for obj in shown_objects if narrowest(obj) > 1024 - 350 - 10} == {}
    stretched = [obj for pane in shown_objects for obj in [pane, *getattr(pane, "children", [])]]
    stretched = [obj for obj in stretched if obj.sizing_mode == "stretch_width" and obj.max_width != obj.width]
    assert [obj.name for obj in stretched if obj.width is not None] == []
    # a circuit of eight heads a layer (960 px) narrows as well, and is as wide as that where there is room
    four = trace_circuit(shown.store.model, shown.store.trace, shown.ablation.patching.corrupted.value)
    eight = {part: replace(grid, share=np.pad(grid.share, ((0, 0), (0, 0), (0, 4)))) for part, grid in
             (("total", four.total), ("direct", four.direct))}  # fmt: skip
    wide = fitted(viz.circuit_figure(replace(four, **eight)))
    assert narrowest(wide) <= 1024 - 350 - 10 < wide.max_width == viz.circuit_figure(four).width + 4 * 80

    heatmap = shown.heads.heatmap.object
    long = "a girl sits on a red bike in the park with the dog and a boy rides a bike on the road by the sea ."
    decode(shown, long)
    store = shown.store
    assert len(store.trace.labels("cross")[1]) >= 20, store.trace.labels("cross")  # or the maps fit anyway
    for tab in (0, 7):  # the heads' (redrawn in place) and the rollout's maps
        shown.tabs.active = tab
    maps = {"heatmap": shown.heads.heatmap.object, "rollout": shown.rollout.figure.object}
    assert maps["heatmap"] is heatmap and not store.error and not store.errors
    assert {name: narrowest(fig) for name, fig in maps.items() if narrowest(fig) > 1024 - 350 - 10} == {}
    own = {
        "heatmap": viz.heatmap(store.trace, store.kind, store.layer, store.head, words=store.words).width,
        "rollout": viz.rollout_figure(store.trace, store.kind, store.layer, words=store.words).width,
    }
    assert {name: (fig.width, fig.max_width) for name, fig in maps.items()} == {
        name: (width, width) for name, width in own.items()
    }
    assert min(own.values()) > FIT_PX  # as wide as before where there is room, wider than the window allows


def test_ablation_and_comparison_stop_at_the_servers_time_limit(lab: dict[str, Path]) -> None:
    """Each tab that decodes again is one request too: the server's time limit bounds it."""
    shown = explorer(lab, tiny="translate", restricted="restricted")
    shown.store.time_limit = 1e-9
    said = "Decoding stopped after 1e-09 s, its time limit: try a shorter text or a smaller beam."
    shown.ablation.add_open_head()
    shown.ablation.ablate()
    assert shown.store.errors["ablation"] == said and not shown.ablation.effect.objects
    shown.tabs.active = 5
    shown.compare.second.value = "restricted"
    assert shown.compare.comparison is None and html.escape(said) in shown.compare.notice.object
    shown.store.time_limit = 0.0
    shown.compare.second.value = "tiny"
    assert shown.compare.comparison is not None


def test_downloads_are_named_after_the_model_the_run_and_the_head(lab: dict[str, Path], tmp_path: Path) -> None:
    """They were all `cross-L1-H0.png` and `attention-run2.trace`: the same head of another
    model or sentence overwrote the last download, or read as the same."""
    shown = explorer(lab, tiny="translate", restricted="restricted")
    decode(shown, "a girl sits .")
    store, export = shown.store, shown.export
    store.kind, store.layer, store.head = "encoder", 0, 3
    run = f"tiny-run{store.run}"
    assert (export.png_download.filename, export.svg_download.filename) == (
        f"{run}-encoder-L0-H3.png",
        f"{run}-encoder-L0-H3.svg",
    )
    assert (export.trace_download.filename, export.html_download.filename) == (f"{run}.trace", f"{run}.html")
    # weighed by what each key writes, the head's map is exported as the Heads tab shows it, and says so
    plain, page = (download.callback().getvalue() for download in (export.svg_download, export.html_download))
    shown.heads.weigh.value = True
    assert export.png_download.filename == f"{run}-encoder-L0-H3-weighed.png"
    assert (export.html_download.filename, export.trace_download.filename) == (f"{run}-weighed.html", f"{run}.trace")
    weighed = export.svg_download.callback().getvalue()
    assert "weighed by ‖αf(x)‖" in weighed and "weighed by" not in plain
    assert "weighed by" in export.html_download.callback().getvalue() and "weighed by" not in page
    (tmp_path / "a.trace").write_bytes(export.trace_download.callback().getvalue())
    assert "weighed" not in AttentionTrace.load(tmp_path / "a.trace").meta  # the file is the recording
    shown.heads.weigh.value = False
    assert export.png_download.filename == f"{run}-encoder-L0-H3.png"
    shown.checkpoint_select.value = "restricted"
    assert export.trace_download.filename == f"restricted-run{store.run}.trace"
    store.checkpoint_name = "classroom/tiny copy"  # as a path typed under a root names it
    export.name_files()
    assert export.trace_download.filename == f"classroom-tiny-copy-run{store.run}.trace"


def test_picked_heads_do_not_carry_over_to_another_model(lab: dict[str, Path]) -> None:
    """The same label ("cross L1 H3") names another head in another model: a new model starts
    with none picked; a new sentence of the same model keeps them."""
    shown = explorer(lab, tiny="translate", restricted="restricted")
    shown.ablation.add_open_head()
    decode(shown, "a girl sits .")
    assert len(shown.ablation.choice.value) == 1
    shown.checkpoint_select.value = "restricted"
    assert shown.store.checkpoint_name == "restricted" and shown.compare.ablated() == []  # what Compare would use
    shown.tabs.active = 4  # the Head ablation tab resets its picks when it opens
    assert shown.ablation.choice.value == []


def test_a_parsers_reference_is_shown_and_drawn_as_a_tree(lab: dict[str, Path]) -> None:
    """A parser's reference is scored in its linearised form; the page shows and draws it as a
    tree over the input's words, and a malformed one is named "the reference"."""
    shown = explorer(lab, parser="parse")
    store = shown.store
    store.beam = 2  # the parser's beam of 21 costs seconds on a random model, and shows nothing more here
    decode(shown, "The dog barks .", TREE)
    assert not store.error and ")NP" not in shown.output.text.object
    assert leaves(parse_tree(store.scored.text)) == ["The", "dog", "barks", "."]
    assert shown.output.tree_box.visible
    decode(shown, "The dog barks .", "(S (NP")
    assert store.error == "The reference: 2 unclosed '(' at the end.", store.error


def test_a_failed_decode_leaves_no_stale_notice(lab: dict[str, Path]) -> None:
    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs . " * 20)  # more pieces than the tiny model's 48
    assert any("truncated" in notice for notice in shown.store.notices) and shown.notice.visible
    decode(shown, "   ")
    assert shown.store.error == "The input is empty." and shown.store.notices == [] and not shown.notice.visible


def test_the_rollout_tab_follows_the_open_kind_and_layer(lab: dict[str, Path]) -> None:
    """Drawn when its tab opens, redrawn for another kind or layer, and for a new sentence while
    it is open; its figure is the rollout of the open kind up to the open layer."""
    from attnlab.record.rollout import rollout

    shown = explorer(lab, tiny="translate")
    assert shown.rollout.figure.object is None  # a hidden tab draws nothing
    shown.tabs.active = 7
    assert shown.tabs._names[7] == text("tab.rollout")
    store = shown.store
    for kind, layer in (("cross", store.trace.layers["cross"][-1]), ("encoder", 0), ("decoder", 1)):
        shown.selection.kind.value = kind
        store.layer = layer
        fig = shown.rollout.figure.object
        assert fig.title.text.endswith(f"up to layer {layer}") and fig.name == f"rollout-{kind}"
        image = fig.select_one({"name": "cells"}).data_source.data["image"][0]
        assert image[::-1].tolist() == rollout(store.trace, kind)[layer].tolist()
    store.head = 3  # a head is no part of a rollout: nothing is redrawn
    assert shown.rollout.figure.object is fig
    decode(shown, "a girl sits on a red bike .")
    assert shown.rollout.figure.object.title.text.endswith("up to layer 1") and not store.error


def test_the_compare_tab_draws_both_rollouts_when_asked(lab: dict[str, Path]) -> None:
    """Its box adds each model's rollout up to the open layer and their difference, follows the
    open kind and layer, and clears them when unticked."""
    shown = explorer(lab, tiny="translate", restricted="restricted")
    shown.tabs.active = 5
    shown.compare.second.value = "restricted"
    assert shown.compare.comparison is not None and all(p.object is None for p in shown.compare.rollout_panes)
    shown.compare.rollouts.value = True
    names = [p.object.name for p in shown.compare.rollout_panes]
    assert names == ["compare-rollout-first", "compare-rollout-second", "compare-rollout-diff"]
    shown.selection.kind.value, shown.store.layer = "encoder", 0
    assert shown.compare.rollout_panes[0].object.title.text.endswith("encoder self-attention · up to layer 0")
    shown.compare.rollouts.value = False
    assert all(p.object is None for p in shown.compare.rollout_panes) and not shown.store.error


def test_the_compare_tab_draws_both_logit_lenses_when_asked(lab: dict[str, Path]) -> None:
    """Its box adds each model's lens on the same output, the second read on the first's (so
    their columns line up), once per comparison: another head leaves them as they were."""
    from attnlab.record.lens import logit_lens

    shown = explorer(lab, tiny="translate", restricted="restricted")
    shown.tabs.active = 5
    shown.compare.second.value = "restricted"
    assert all(p.object is None for p in shown.compare.lens_panes)
    shown.compare.lenses.value = True
    first, second = (p.object for p in shown.compare.lens_panes)
    assert (first.name, second.name) == ("compare-lens-first", "compare-lens-second")
    assert " ".join(first.title.text.split()) == "A · logit lens (red: not yet the final choice)"
    # B reads A's output: its red is where it would not write A's piece (its top row was red under
    # A's legend, "not yet the final choice")
    assert (
        " ".join(second.title.text.split()) == "B · logit lens, read on the output of A (red: not the piece of A there)"
    )
    c = shown.compare.comparison
    expected = logit_lens(shown.compare.second_model, c.second_on_first.trace).p.ravel()
    assert second.select_one({"name": "cells"}).data_source.data["p"].tolist() == expected.tolist()
    assert first.x_range.end == second.x_range.end  # the same output positions
    shown.store.head = 1
    assert shown.compare.lens_panes[0].object is first
    shown.compare.lenses.value = False
    assert all(p.object is None for p in shown.compare.lens_panes) and not shown.store.error


def test_an_output_of_no_words_is_said_not_left_blank(lab: dict[str, Path]) -> None:
    """A hypothesis that ends at once (`</s>` first; the bundled EN→DE model has one at beam 12)
    was a table row with a score and an empty cell; it says so in the page's language, in the
    table and where it is the output itself."""
    shown = explorer(lab, tiny="translate")
    store, empty = shown.store, text("output.empty")
    best = store.result
    store.result = replace(best, hypotheses=[best.hypotheses[0], replace(best.hypotheses[0], text="", tokens=["</s>"])])
    shown.output.show()
    assert shown.output.text.object.count(html.escape(empty)) == 1
    store.result = replace(best, text=" ", hypotheses=[replace(best, text=" ")])
    shown.output.show()
    assert shown.output.text.object.count(html.escape(empty)) == 2  # the output, and its row


def test_a_listed_model_opened_by_path_is_named_as_the_picker_names_it(lab: dict[str, Path]) -> None:
    """The picker's "tiny" opened again as "tiny-parser" in the path box was "tiny" in the picker
    and "tiny-parser" above the model's task, in the exports' names and in the Corpus tab's notes."""
    shown = explorer(lab, tiny="translate", parser="parse")
    shown.open(lab["parse"].name)
    assert shown.store.model.task == "parse" and not shown.store.error, shown.store.error
    assert shown.checkpoint_select.value == shown.store.checkpoint_name == "parser"
    assert "parser<br>" in shown.model_info.object and lab["parse"].name not in shown.model_info.object


def test_the_open_heads_weights_read_as_a_table(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticked, the Heads tab shows the open head's weights as a table: a header cell a key piece,
    a row a query piece, each cell its weight (masked ones "—"); another head redraws it; a map too
    big to read that way is one line; unticked, nothing."""
    import re

    from attnlab.app.explorer import heads as heads_tab

    shown = explorer(lab, tiny="translate")
    store, tab = shown.store, shown.heads
    assert not tab.table.visible
    tab.as_table.value = True
    for kind, layer, head in (("decoder", 1, 2), ("cross", 0, 1)):
        store.select(kind=kind, layer=layer, head=head)
        table = tab.table.object
        weights = store.trace.attention(kind, layer)[head]
        cells = [float(c) if c != "—" else None for c in re.findall(r"<td[^>]*>([^<]*)</td>", table)]
        assert len(cells) == weights.size and tab.table.visible
        shown_weights = np.array([w if w is not None else 0.0 for w in cells]).reshape(weights.shape)
        np.testing.assert_allclose(shown_weights, weights, atol=5e-4)
        assert (None in cells) == (kind == "decoder")  # the causal mask's cells
        assert f"layer {layer} · head {head}" in table
    monkeypatch.setattr(heads_tab, "MOST", 3)
    store.select(head=0)
    assert "more than 3 pieces a side to read as a table" in tab.table.object
    tab.as_table.value = False
    assert not tab.table.visible


def test_the_rollout_and_the_lens_read_as_tables(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticked, the Attention rollout and Logit lens tabs show their figure's numbers as a table
    under it, redrawn with the figure (another layer, another sentence); a map too big for a table
    is one line; unticked, nothing."""
    import re

    from attnlab.app.explorer import figure_tab
    from attnlab.record.lens import logit_lens
    from attnlab.record.rollout import rollout

    shown = explorer(lab, tiny="translate")
    store, tab = shown.store, shown.rollout
    tab.as_table.value = True  # (before the tab was ever drawn: nothing to read yet)
    shown.tabs.active = 7
    for layer in (0, 1):
        store.layer = layer
        flow = rollout(store.trace, store.kind)[layer]
        cells = [float(c) for c in re.findall(r"<td>([^<]*)</td>", tab.table.object)]
        np.testing.assert_allclose(np.reshape(cells, flow.shape), flow, atol=5e-4)
        assert tab.table.visible and f"up to layer {layer}</caption>" in tab.table.object
    monkeypatch.setattr(figure_tab, "MOST", 3)
    store.layer = 0
    assert "more than 3 pieces a side to read as a table" in tab.table.object
    monkeypatch.undo()
    tab.as_table.value = False
    assert not tab.table.visible
    shown.tabs.active = 8
    shown.lens.as_table.value = True
    decode(shown, "a girl sits on a red bike .")
    lens = logit_lens(store.model, store.trace)
    shown_p = [float(p) for p in re.findall(r" ([0-9.]+)</td>", shown.lens.table.object)]
    np.testing.assert_allclose(shown_p, lens.p.ravel(), atol=5e-4)
    assert shown.lens.table.visible and not store.error


def test_the_output_is_marked_in_its_language(lab: dict[str, Path]) -> None:
    """A screen reader read the German translation with the page's English (or Spanish) voice:
    the output and each hypothesis carry the model's target language; a parse, none."""
    bundled = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
    shown = Explorer({"de": str(bundled), "parser": str(lab["parse"])}, CheckpointRoots([lab["root"]]), lang="es")
    shown.open_listed("de")
    said = shown.output.text.object
    assert said.count("<div class='attn-output' lang='de'>") == 1
    assert said.count("<td lang='de'>") == len(shown.store.result.hypotheses) > 1
    assert '<html lang="es">' in shown.export.html_download.callback().getvalue()  # the page's: bokeh said "en"
    shown.open_listed("parser")
    assert " lang=" not in shown.output.text.object


@pytest.mark.parametrize(
    ("lang", "said"),
    [("en", "1 finished hypothesis (beam 4, α 0.6)"), ("es", "1 hipótesis completa (haz 4, α 0.6)")],
)
def test_one_hypothesis_is_counted_in_the_singular(lab: dict[str, Path], lang: str, said: str) -> None:
    """A beam that stops with one finished hypothesis (or greedy search) read from an entry of its
    own; it is the plural's `.one` now, as every other count's singular."""
    shown = Explorer({"tiny": str(lab["translate"])}, CheckpointRoots([lab["root"]]), lang=lang)
    shown.open_listed("tiny")
    best = shown.store.result
    shown.store.result = replace(best, hypotheses=best.hypotheses[:1])
    shown.output.show()
    assert f"<summary class='attn-muted'>{html.escape(said)}</summary>" in shown.output.text.object


def test_a_run_with_one_snapshot_and_an_unnamed_aer_set(lab: dict[str, Path], tmp_path: Path) -> None:
    """A run that recorded its probes at one checkpoint said "1 snapshots (steps 10–10)", and its
    AER table, which named no set, drew a curve titled "AER % on  (cross layer 1)"."""
    run = tmp_path / "run"
    shutil.copytree(lab["translate"], run)
    load(run).score("the dog runs .", "der hund läuft .", record=True).trace.save(run / "probes/step_10/probe_0.trace")
    rows = [{"reading": f"head L1 H{h}", "method": "head", "layer": 1, "head": h, "aer": 0.5} for h in range(2)]
    (run / "probes/step_10/alignment.json").write_text(json.dumps({"set": "", "pairs": 2, "rows": rows}))
    said = {
        "en": ("1 snapshot (step 10); the differences are to step 10 itself.", "AER % (cross layer 1)"),
        "es": ("1 instantánea (paso 10); las diferencias son respecto al propio paso 10.", "AER % (cruzada, capa 1)"),
        "zh": ("1 个快照（第 10 步）；差异均相对于第 10 步。", "AER %（交叉，第 1 层）"),
    }
    for lang, (note, aer) in said.items():
        shown = Explorer({"run": str(run)}, CheckpointRoots([tmp_path]), lang=lang)
        shown.open_listed("run")
        shown.store.kind, shown.store.layer = "cross", 1
        shown.tabs.active = 3  # the timeline
        assert shown.timeline.note.object == html.escape(note) and not shown.store.error, shown.store.error
        figure = shown.timeline.figures.objects[-1].object
        assert figure.name == "timeline-aer" and aer in figure.title.text.replace("\n", " "), figure.title.text


def test_the_heads_tab_draws_the_open_head_as_lines_too(lab: dict[str, Path]) -> None:
    """Beside its heatmap, the open head as lines (bertviz's head view), on the same scale, in place
    when another head or kind is opened, in the page's words."""
    shown = explorer(lab, tiny="translate")
    store, lines = shown.store, shown.heads.lines.object
    assert lines.name == f"lines-{store.kind}" and f"layer {store.layer} · head {store.head}" in lines.title.text
    store.select(kind="encoder", layer=0, head=1)
    assert (
        shown.heads.lines.object is lines and lines.name == "lines-encoder" and "layer 0 · head 1" in lines.title.text
    )
    # and what it does on this sentence, in a sentence (`head_pattern` of its statistics)
    name, share = head_pattern(next(r for r in store.stats if (r["kind"], r["layer"], r["head"]) == ("encoder", 0, 1)))
    said = html.unescape(shown.heads.caption.object.split("attn-head-pattern'>")[1].removesuffix("</span>"))
    assert said == text("pattern.lead", "en", what=text("pattern." + name, "en", share=share))
    assert said.startswith("On this sentence, this head ") and said.endswith(".")
    data = lines.select_one({"name": "lines"}).data_source.data
    weights = store.trace.attention("encoder", 0)[1]
    assert len(data["q"]) == int((weights >= 0.01).sum())
    store.scale_to_max = True  # (as the heatmap: its largest weight is the darkest line)
    assert max(lines.select_one({"name": "lines"}).data_source.data["alpha"]) == 1.0
    shown.heads.every.value = True  # every head of the layer, each in its colour (bertviz's default)
    every = store.trace.attention("encoder", 0)
    assert len(lines.select_one({"name": "lines"}).data_source.data["q"]) == int((every >= 0.01).sum())
    assert "every head" in lines.title.text and shown.heads.lines.object is lines
    store.select(layer=1)
    assert "layer 1 · every head" in lines.title.text.replace("\n", " ")
    shown.heads.every.value = False
    assert f"layer 1 · head {store.head}" in lines.title.text


@pytest.mark.parametrize("lang", ["es", "zh"])
def test_the_compare_tab_says_how_the_model_with_heads_off_was_read(lab: dict[str, Path], lang: str) -> None:
    """With heads off, A and B are the model with all heads and with one off: "Los mapas de 1 cabeza
    desactivada se registran mientras lee la salida de todas las cabezas" named them as models. And
    Chinese runs its two sentences on after "。" ("两者输出相同。 B 的注意力图": a stray space)."""
    from attnlab.app.explorer.compare import ABLATED

    shown = Explorer({"tiny": str(lab["translate"])}, CheckpointRoots([lab["root"]]), lang=lang)
    shown.open_listed("tiny")
    shown.tabs.active = 4  # Head ablation: the open head picked there, for this model
    shown.ablation.add_open_head()
    shown.tabs.active = 5
    shown.compare.second.value = ABLATED
    said = html.unescape(shown.compare.outputs.object)
    ablated = text(
        "compare.read_on_ablated",
        lang,
        first=text("compare.all_heads", lang),
        second=text("compare.heads_off", lang, count=1),
    )
    assert ablated in said and "。 " not in said, said


def test_the_equation_tab_takes_apart_the_score_of_the_key_the_query_reads_most(lab: dict[str, Path]) -> None:
    """Under Eq. (1), one score dimension by dimension: of the key the open query reads most, or of
    the key the reader picks, until another query or head is opened."""
    shown = explorer(lab, tiny="translate")
    store = shown.store
    store.select(kind="cross", layer=0, head=1)
    shown.tabs.active = 1
    weights = store.trace.attention("cross", 0)[1]
    assert shown.equation.key.value == int(weights[0].argmax())
    products = shown.equation.dot.object.select_one({"name": "dot-products"}).renderers[0].data_source.data["top"]
    assert sum(products) == pytest.approx(float(shown.equation._parts["scores"][0, shown.equation.key.value]), abs=1e-5)
    other = (shown.equation.key.value + 1) % weights.shape[1]
    shown.equation.key.value = other  # picked: kept while the same query is open (a mask toggle redraws)
    store.mask = not store.mask
    assert shown.equation.key.value == other and f"key {other} (" in shown.equation.dot.object.children[0].title.text
    store.query = 1  # another query: the key it reads most
    assert shown.equation.key.value == int(weights[1].argmax())
    store.query, shown.equation.key.value = 0, 0
    store.select(kind="decoder")  # whose query 0 reads key 0 alone: the menu keeps its value, the figure goes on
    title = shown.equation.dot.object.children[0].title.text
    assert title.startswith(store.open_head) and store.open_head.startswith("decoder"), title  # (it kept cross's)


def test_a_download_that_fails_says_so_in_one_line(lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed export said nothing (the button only spun; the traceback went to the server's log):
    it is one line in the error box, its traceback still in the log."""
    shown = explorer(lab, tiny="translate")

    def broken(*_args: object, **_kwargs: object) -> str:
        raise RuntimeError("no page today")

    monkeypatch.setattr("attnlab.viz.standalone_html", broken)
    assert shown.export.html_download.callback() is None
    assert shown.store.error == text("error.internal", "en", error="RuntimeError")
    assert shown.export.png_download.callback().getvalue()[:4] == b"\x89PNG"  # the others still export


@pytest.mark.parametrize("lang", ["en", "es", "zh"])
def test_the_dashboard_says_what_each_column_measures(lab: dict[str, Path], lang: str) -> None:
    """Its table's headers ("prev", "eos", "max") said nothing of what they measure; a line under
    it names each header as the table writes it, in the page's language."""
    shown = Explorer({"tiny": str(lab["translate"])}, CheckpointRoots([lab["root"]]), lang=lang)
    shown.open_listed("tiny")
    shown.tabs.active = 2
    table = next(p.object for p in shown.dashboard.layout.select(pn.pane.Bokeh) if p.object.name == "stats-table")
    legend = shown.dashboard.layout.select(lambda o: "attn-stats-columns" in getattr(o, "css_classes", []))[0]
    headers = [html.unescape(column.title) for column in table.columns][4:]  # (kind, layer, head, pattern first)
    said = html.unescape(re.sub("<[^>]+>", "", legend.object))  # ("</s>" is escaped in it)
    assert len(headers) == 8 and all(re.search(f"(^|[ ·。、]){re.escape(h)}[:：,、]", said) for h in headers), said
    assert said.startswith({"en": "Each column", "es": "Cada columna", "zh": "每一列"}[lang])


def test_an_edit_asked_for_before_a_new_sentence_draws_nothing_stale(
    lab: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a server session the Heads tab's edits run at the next tick; a sentence opened from the
    Corpus tab is decoded in between. The edit asked for with the sentence before drew its map,
    weighed against the new one's: "operands could not be broadcast together with shapes (16,)
    (8,)" in the server's log. Now it draws nothing; the one asked for with the new sentence draws."""
    from attnlab.app.explorer import heads as heads_tab

    shown = explorer(lab, tiny="translate")
    decode(shown, "a man in a blue shirt rides a red bike down the long street .")
    queued: list[tuple] = []
    monkeypatch.setattr(heads_tab, "bokeh_edit", lambda edit, *args, **kwargs: queued.append((edit, args, kwargs)))
    shown.heads.draw_heatmap()  # (a stale tab drawn as the Corpus tab opens a sentence)
    shown.heads.draw_grid()
    decode(shown, "the dog runs .")
    assert len(queued) >= 4  # the two asked for before the sentence, and the sentence's own
    for edit, args, kwargs in queued:
        edit(*args, **kwargs)
    q_len, k_len = shown.store.trace.attention(shown.store.kind, shown.store.layer).shape[1:]
    assert f"{q_len}×{k_len}" in shown.heads.caption.object and "attn-weighed" not in shown.heads.caption.object
