"""The logit lens (`attnlab.record.lens`), its figure (`attnlab.viz.lens_figure`) and the explorer's
tab that shows it: the top layer read through the lens is the model's own distribution (with the
heads that were off kept off, and a pre-norm stack's final LayerNorm applied), greedy output is
the top layer's first choice, the refusals are one line, and the figure says what the lens holds.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from test_explorer_views import decode, explorer, lab  # noqa: F401 (the module's fixture)
from test_patching_views import one_line

import attnlab
from attnlab import viz
from attnlab.app.i18n import text
from attnlab.app.words import figure_words
from attnlab.decode.ablation import token_logprobs
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError
from attnlab.model.transformer import Transformer
from attnlab.record.equation import trace_ids
from attnlab.record.lens import Lens, logit_lens

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINTS / "multi30k-en-de")


def model_probabilities(model: Model, trace: attnlab.AttentionTrace, heads: dict | None = None) -> np.ndarray:
    """P(produced piece) at each position from the model's own teacher-forced forward pass."""
    return np.exp(token_logprobs(model, *trace_ids(model, trace), heads))


def test_the_top_layer_is_the_models_own_distribution(model: Model) -> None:
    """Each layer's row is read through the pre-softmax projection; the top one must then be what
    `Model.score` computes. Reading any layer but the top there fails this (the layer below gives
    the reference's pieces probabilities up to 0.9 apart here)."""
    trace = model.score(
        "A little girl climbs into a wooden playhouse.", "Ein kleines Mädchen klettert in ein Spielhaus."
    ).trace
    lens = logit_lens(model, trace)
    assert lens.p.shape == lens.rank.shape == (model.config.n_layers, len(trace.tgt_tokens))
    np.testing.assert_allclose(lens.p[-1], model_probabilities(model, trace), atol=1e-5)
    assert np.abs(lens.p[-2] - lens.p[-1]).max() > 0.1  # the layers do differ: the check above can fail
    assert lens.produced == trace.tgt_tokens and lens.inputs == trace.tgt_input_tokens
    assert (np.diff(lens.top_p, axis=-1) <= 0).all() and lens.top_p.shape[-1] == 5  # likeliest first
    for layer in range(lens.n_layers):  # a piece ranked first is the cell's first choice, and only then
        firsts = [cell[0] for cell in lens.top[layer]]
        assert [f == p for f, p in zip(firsts, lens.produced, strict=True)] == (lens.rank[layer] == 0).tolist()


def test_greedy_output_is_the_top_layers_first_choice(model: Model) -> None:
    result = model.translate("Two dogs play in the snow.", beam=1, record=True)
    lens = logit_lens(model, result.trace, top=3)
    assert (lens.rank[-1] == 0).all() and None not in lens.settled
    assert [cell[0] for cell in lens.top[-1]] == result.tokens
    assert min(lens.settled) < lens.n_layers - 1  # some word is decided below the top on a trained model


def test_heads_that_were_off_stay_off(model: Model) -> None:
    """A trace recorded with heads switched off is read with them off: its top layer is the
    ablated model's distribution, which differs from the whole model's by up to ~0.3 here."""
    heads = {("cross", -1): list(range(model.config.n_heads)), ("cross", -2): [0, 1]}
    result = model.translate("A man rides a bike down the street.", record=True, ablate_heads=heads)
    assert result.trace.meta["heads_off"]
    lens = logit_lens(model, result.trace)
    np.testing.assert_allclose(lens.p[-1], model_probabilities(model, result.trace, heads), atol=1e-5)
    assert np.abs(lens.p[-1] - model_probabilities(model, result.trace)).max() > 0.05


def test_a_pre_norm_stack_reads_every_layer_through_its_final_norm(model: Model) -> None:
    """A pre-norm model's top layer reaches the projection through a final LayerNorm; without it
    the lens's top row is not the model's distribution (a random model, so the norm's scale is far
    from the layers' own)."""
    torch.manual_seed(0)
    config = replace(model.config, norm="pre", n_layers=2)
    net = Transformer(config)
    with torch.no_grad():
        net.final_norms[1].weight.fill_(3.0)
    pre = Model(net, model.tokenizer, model.meta)
    trace = pre.score("A dog runs.", "Ein Hund läuft.").trace
    lens = logit_lens(pre, trace)  # a random model's probabilities are ~1/V: compared as logarithms
    np.testing.assert_allclose(np.log(lens.p[-1]), np.log(model_probabilities(pre, trace)), atol=1e-4)


@pytest.mark.parametrize("variant", ["swish-shared", "separate-untied"])
def test_an_imported_marian_model_is_read_through_its_own_output_layer(tmp_path: Path, variant: str) -> None:
    """Marian's logits carry a bias, and with separate vocabularies the output matrix and the
    pieces are the target side's: the lens's top row is still the model's own distribution, and
    its pieces are the target vocabulary's."""
    from marian_models import make_marian

    marian = load(make_marian(tmp_path / variant, variant))
    trace = marian.translate("the dog runs in the park", record=True).trace
    lens = logit_lens(marian, trace)
    np.testing.assert_allclose(np.log(lens.p[-1]), np.log(model_probabilities(marian, trace)), atol=1e-4)
    table = set(marian.piece_table())
    assert all(piece in table for layer in lens.top for cell in layer for piece in cell)


def test_settled_is_the_lowest_layer_from_which_the_output_stays_first() -> None:
    rank = np.array([[1, 0, 0, 0], [0, 1, 0, 2], [0, 0, 0, 1]])  # (layers, positions)
    lens = Lens(["<s>"] * 4, ["a"] * 4, [[["a"]] * 4] * 3, np.ones((3, 4, 1)), np.ones((3, 4)), rank)
    assert lens.settled == [1, 2, 0, None]


def test_what_the_lens_cannot_read_is_one_line(model: Model) -> None:
    trace = model.score("A dog runs.", "Ein Hund läuft.").trace
    restricted = load(CHECKPOINTS / "multi30k-en-de-r3")
    malformed = model.score("A dog runs.", "Ein Hund läuft.").trace
    malformed.meta["heads_off"] = [["cross", 0]]
    for args, kwargs, match in (
        ((model.model, trace), {}, "needs what attnlab.load returns, got Transformer$"),
        ((None, trace), {}, "needs what attnlab.load returns, got NoneType$"),
        ((model, None), {}, "^the trace is a NoneType"),
        ((model, trace), {"top": 0}, "^top .* got 0$"),
        ((model, trace), {"top": 1.5}, "^top .* got 1.5$"),
        ((restricted, trace), {}, "recorded by another model"),
        ((model, malformed), {}, r"^the trace's heads_off is a list of \[kind, layer, head\], got \[\['cross', 0\]\]$"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            logit_lens(*args, **kwargs)
        assert "\n" not in str(info.value)


def test_the_figure_colours_by_the_outputs_probability_and_names_each_layers_choice(model: Model) -> None:
    lens = logit_lens(model, model.score("A dog runs.", "Ein Hund rennt.").trace)
    fig = viz.lens_figure(lens)
    data = fig.select_one({"name": "cells"}).data_source.data
    layers, n = lens.p.shape
    assert len(data["p"]) == layers * n and fig.name == "logit-lens"
    np.testing.assert_array_equal(data["p"], lens.p.ravel())
    np.testing.assert_array_equal(np.asarray(data["y"]) - 0.5, np.repeat(np.arange(layers), n))  # layer 0 at the bottom
    other = [i for i, r in enumerate(lens.rank.ravel()) if r]
    assert other and all(data["text_color"][i] == "#c0392b" for i in other)  # the layer still prefers another piece
    assert all(color != "#c0392b" for i, color in enumerate(data["text_color"]) if i not in other)
    assert data["label"][-1] == lens.top[-1][-1][0] == "</s>"
    spanish = viz.lens_figure(lens, words=figure_words("es"))
    assert one_line(spanish.title.text) == text("figure.lens_title", "es")
    with pytest.raises(AttnlabError, match="^lens_figure draws what attnlab.logit_lens returns, got AttentionTrace$"):
        viz.lens_figure(model.score("A dog runs.", "Ein Hund rennt.").trace)


def test_the_table_reads_each_layers_choice_and_the_outputs_probability(model: Model) -> None:
    """What a screen reader gets of the grid: a row a layer (0 first), a column an output piece;
    each cell the layer's first choice and the probability it gives the piece output there, red
    and its rank said where the layer still prefers another, its likeliest pieces in its title."""
    import html
    import re

    from attnlab.viz.labels import piece_label, spelled

    lens = logit_lens(model, model.score("A dog runs.", "Ein Hund rennt.").trace)
    table = viz.lens_table(lens)
    cells = re.findall(
        r"<td( style='color:#c0392b')? title='([^']*)' aria-label='([^']*)'>([^<]*) ([0-9.]+)</td>", table
    )
    layers, n = lens.p.shape
    assert len(cells) == layers * n and table.count("<th scope='row'>") == layers
    np.testing.assert_allclose([float(c[-1]) for c in cells], lens.p.ravel(), atol=5e-4)
    assert [bool(c[0]) for c in cells] == (lens.rank.ravel() > 0).tolist()  # red: another piece first
    firsts = [html.escape(piece_label(spelled(cell[:1])[0], None)) for row in lens.top for cell in row]
    assert [c[3] for c in cells] == firsts
    assert all(c[2].endswith(f"rank of the output {r + 1}") for c, r in zip(cells, lens.rank.ravel(), strict=True))
    assert cells[0][1].startswith("likeliest: ") and cells[0][1].count(",") >= 4  # (the hover's five)
    assert one_line(re.search("<caption>(.*)</caption>", viz.lens_table(lens, words=figure_words("es")))[1]) == (
        html.escape(one_line(text("figure.lens_title", "es")))
    )
    with pytest.raises(AttnlabError, match="more than 3 pieces a side"):
        viz.lens_table(lens, most=3)
    with pytest.raises(AttnlabError, match="^lens_table draws what attnlab.logit_lens returns"):
        viz.lens_table(model.score("A dog runs.", "Ein Hund rennt.").trace)


def test_the_lens_tab_draws_once_per_run(lab: dict[str, Path]) -> None:  # noqa: F811 (the fixture)
    """Drawn when its tab opens and for a new sentence while it is open; another kind, layer or
    head leaves it as it was (nothing in it depends on them)."""
    shown = explorer(lab, tiny="translate")
    assert shown.lens.figure.object is None  # a hidden tab draws nothing
    shown.tabs.active = 8
    assert shown.tabs._names[8] == text("tab.lens")
    fig = shown.lens.figure.object
    assert fig.name == "logit-lens" and len(fig.select_one({"name": "cells"}).data_source.data["p"]) == (
        shown.store.model.config.n_layers * len(shown.store.trace.tgt_tokens)
    )
    lens = logit_lens(shown.store.model, shown.store.trace)
    counts = " · ".join(f"{layer}: {lens.settled.count(layer)}" for layer in range(lens.n_layers))
    assert f"decided at decoder layer {counts}; at none (beam search looked ahead): {lens.settled.count(None)}." in (
        shown.lens.summary.object
    )
    import panel as pn

    beside = [box for box in shown.lens.layout.select(pn.FlexBox) if shown.lens.text in box.objects]
    assert beside and shown.lens.figure in beside[0].objects, "the explanation goes beside the figure, as in rollout"
    shown.selection.kind.value, shown.store.layer, shown.store.head = "encoder", 0, 1
    assert shown.lens.figure.object is fig
    decode(shown, "a girl sits on a red bike .")
    assert shown.lens.figure.object is not fig and not shown.store.error


# -- the command -------------------------------------------------------------------------------------------
def test_the_command_says_where_each_piece_was_decided(
    model: Model, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per input line (`piece@layer`), an empty line for an empty one (not a failure: status 0,
    as translate answers it; it was status 1), and the layers' shares over the file on stderr; `--json`
    carries the lens's numbers, and an object for a blank or failed line too (an empty line there broke
    a JSON-lines reader): the keys of every other object, their lists empty, a failed one's "error"."""
    from attnlab.cli import main

    source = tmp_path / "in.en"
    source.write_text("A dog runs.\n\nTwo men are working on a roof.\n", encoding="utf-8")
    assert main(["lens", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "--input", str(source)]) == 0
    captured = capsys.readouterr()
    first, empty, third = captured.out.splitlines()
    lens = logit_lens(model, model.translate("A dog runs.", record=True).trace)
    expected = [f"{p}@{'-' if layer is None else layer}" for p, layer in zip(lens.produced, lens.settled, strict=True)]
    assert first.split() == expected and empty == "" and third.endswith("</s>@0")
    assert "attnlab lens: line 2 is empty; writing an empty line" in captured.err
    assert "attnlab lens: 2 of 3 lines in " in captured.err
    pieces = len(first.split()) + len(third.split())
    assert f"of {pieces} pieces, decided at layer 0: " in captured.err.splitlines()[-1]

    reference = tmp_path / "ref.de"
    reference.write_text("Ein Hund rennt.\n\n\n", encoding="utf-8")  # line 3's reference is empty: it fails
    argv = ["lens", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "-i", str(source), "--json", "--top", "2"]
    assert main([*argv, "--reference", str(reference)]) == 1
    captured = capsys.readouterr()
    row, blank, failed = (json.loads(line) for line in captured.out.splitlines())
    forced = logit_lens(model, model.score("A dog runs.", "Ein Hund rennt.").trace, top=2)
    assert row["tokens"] == forced.produced and row["decided"] == forced.settled and row["top"] == forced.top
    np.testing.assert_allclose(row["p"], forced.p, atol=1e-4)
    assert blank == dict.fromkeys(row, []) and failed == blank | {"error": "its reference is empty"}
    assert "line 2 is empty; writing an empty object" in captured.err
    assert "line 3: its reference is empty; writing an empty object" in captured.err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--json", "--top", "0"], "--top is a whole number from 1 to 50, got 0"),
        (["--reference", "{short}"], "3 input lines but 1 reference lines"),
        # read by nothing, without a word: the lines' pieces carry no --top; teacher-forced, nothing is decoded
        (["--top", "5"], "--top is how many pieces the lens's --json lists: give it with --json, without --attribute"),
        (
            ["--reference", "{short}", "--alpha", "1"],
            "--alpha is a decoding option, and --reference reads teacher-forced: nothing is decoded",
        ),
    ],
)
def test_the_command_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    from attnlab.cli import main

    source, short = tmp_path / "in.en", tmp_path / "short.de"
    source.write_text("a\nb\nc\n", encoding="utf-8")
    short.write_text("x\n", encoding="utf-8")
    extra = [arg.format(short=short) for arg in extra]
    assert main(["lens", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "-i", str(source), *extra]) == 2
    assert capsys.readouterr().err.strip() == f"attnlab lens: error: {message}"


def test_a_tap_on_a_cell_names_its_layer_and_position(model: Model) -> None:
    """Whatever a crafted tap sends (a string, NaN, a point off the grid) picks nothing."""
    from bokeh.events import Tap

    lens = logit_lens(model, model.score("A dog runs.", "Ein Hund rennt.").trace)
    picked: list[tuple[int, int]] = []
    fig = viz.lens_figure(lens, on_select=lambda layer, position: picked.append((layer, position)))
    for x, y in ((2.5, 1.2), ("1", 0.5), (float("nan"), 0.5), (-0.1, 0.5), (0.5, 3.0), (99.0, 0.5)):
        fig._trigger_event(Tap(fig, x=x, y=y))
    assert picked == [(1, 2)]
    with pytest.raises(AttnlabError, match=r"^on_select is a function of \(layer, position\) or None, got 3$"):
        viz.lens_figure(lens, on_select=3)


def test_a_tap_on_the_lens_tab_opens_what_that_layer_read_there(lab: dict[str, Path]) -> None:  # noqa: F811
    shown = explorer(lab, tiny="translate")
    shown.tabs.active = 8
    from bokeh.events import Tap

    fig = shown.lens.figure.object
    fig._trigger_event(Tap(fig, x=2.5, y=0.5))  # the cell of layer 0, position 2
    store = shown.store
    assert (store.kind, store.layer, store.query, shown.tabs.active) == ("cross", 0, 2, 1)
    assert shown.equation.eq1.object is not None and "query 2" in shown.equation.eq1.object.children[0].title.text
    assert shown.lens.figure.object is fig and not store.error
