"""Patching's views: `viz.patching_figure` (every head's share of the clean/corrupted difference, a
diverging scale around 0, heads not patched grey and labelled "–", a tap naming a head),
`viz.residual_patching_figure` (each layer's output at each position, one side at a time, on the
same scale; a changed source piece labelled "▁man→▁woman"), and the explorer's Head ablation tab,
whose patching box draws them for the open sentence and a corrupted one typed beside it, names the
head that moves most and where the difference sits, and says in one line why it cannot.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_explorer_views import decode, explorer, lab  # noqa: F401 (the module's fixture)

from attnlab import viz
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.patching import patch_heads, patch_residual
from attnlab.errors import AttnlabError
from attnlab.record.patching import HeadPatching, trace_patching
from attnlab.record.paths import PathPatching, trace_path_patching
from attnlab.record.residual import ResidualPatching, trace_residual_patching
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
CLEAN = "A man is riding a horse on the beach."
CORRUPTED = "A woman is riding a horse on the beach."  # as many pieces: the encoder's positions line up
LONGER = "A young woman is riding a horse on the beach."  # more pieces: the encoder's heads are not patched


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


def one_line(title: str) -> str:
    """A figure's title as written, before it was wrapped onto lines at spaces (`viz.cells`)."""
    return title.replace("\n", " ")


def cell_colors(fig: object) -> list[str]:
    """Each cell's fill as the browser paints it: the colour mapper applied to its value."""
    cells = fig.select_one({"name": "cells"})
    mapper = cells.glyph.fill_color.transform
    palette, low, high = mapper.palette, mapper.low, mapper.high
    colors = []
    for value in cells.data_source.data["value"]:
        if np.isnan(value):
            colors.append(mapper.nan_color)
            continue
        index = int((min(max(value, low), high) - low) / (high - low) * len(palette))
        colors.append(palette[min(index, len(palette) - 1)])
    return colors


# -- the figure -------------------------------------------------------------------------------------------
def test_an_estimate_says_so_in_its_title(model: Model) -> None:
    """Attribution patching's shares are estimates, and can be far from the measured ones: both
    views say so before their own title; a title the caller gives is theirs, as given."""
    heads = patch_heads(model, CLEAN, CORRUPTED, method="attribution")
    layers = patch_residual(model, CLEAN, CORRUPTED, method="attribution")
    own = (viz.WORDS["patching.title_denoise"], viz.WORDS["residual.title_denoise"].format(side="encoder"))
    for fig, title in zip((viz.patching_figure(heads), viz.residual_patching_figure(layers)), own, strict=True):
        assert one_line(fig.title.text) == viz.WORDS["patching.estimated"].format(title=title)
    assert viz.patching_figure(heads, title="mine").title.text == "mine"
    measured = viz.residual_patching_figure(patch_residual(model, CLEAN, CORRUPTED))
    assert one_line(measured.title.text) == own[1]


def test_the_figure_shows_every_head_with_its_value(model: Model) -> None:
    from bokeh.events import Tap
    from bokeh.models import HoverTool, TapTool

    from attnlab.app.i18n import text
    from attnlab.app.words import figure_words
    from attnlab.viz.labels import title_px

    patching = patch_heads(model, CLEAN, LONGER)
    assert patching.patched == ("decoder", "cross") and np.isnan(patching.share[0]).all()  # or the test shows nothing
    picked: list[tuple[str, int, int]] = []
    fig = viz.patching_figure(patching, on_select=lambda *head: picked.append(head))
    data = fig.select_one({"name": "cells"}).data_source.data
    np.testing.assert_array_equal(data["value"], patching.share.ravel())  # NaN where not patched, in place
    share, heads = patching.share.ravel(), patching.share[0].size
    assert data["label"][:heads] == ["–"] * heads  # the encoder block: not patched
    assert data["label"][heads:] == [f"{v:.2f}".replace("-0.00", "0.00") for v in share[heads:]]
    assert fig.name == "head-patching" and one_line(fig.title.text) == viz.WORDS["patching.title_denoise"]
    widest = max(title_px(line) for line in fig.title.text.split("\n"))
    assert fig.width >= widest + 100  # the title starts where the cells do: it was cut there
    assert fig.select_one({"name": "kinds"}).data_source.data["text"] == ["encoder", "decoder", "cross"]
    # grey where not patched, labelled in grey; a head that moved the output the other way has another colour
    colors = cell_colors(fig)
    assert set(colors[:heads]) == {"#e0e0e0"} and "#e0e0e0" not in colors[heads:]
    negative, positive = int(np.nanargmin(share)), int(np.nanargmax(share))
    assert share[negative] < 0 < share[positive] and colors[negative] != colors[positive]
    mapper = fig.select_one({"name": "cells"}).glyph.fill_color.transform
    assert mapper.low == -mapper.high == -min(np.nanmax(np.abs(share)), 1.0)  # centred on 0
    assert colors[positive] == mapper.palette[-1] and colors[negative] != "#ffffff"
    tips = dict(fig.select_one(HoverTool).tooltips)
    assert tips[viz.WORDS["patching.share"]] == "@share_tip"
    assert data["share_tip"][0] == viz.WORDS["patching.not_patched"] and data["share_tip"][-1] == f"{share[-1]:+.3f}"
    # cross-attention is the third block of 4 heads and a gap: x 10-14; layer 2 is y 2-3
    for x, y in ((12.5, 2.5), (4.5, 0.5), ("1", 0.5), (float("nan"), 0.5), (-0.1, 0.5), (0.5, 3.2), (0.5, 1.5)):
        fig._trigger_event(Tap(fig, x=x, y=y))
    assert picked == [("cross", 2, 2), ("encoder", 1, 0)]  # a grey head can still be picked to switch off
    assert fig.select_one(TapTool).behavior == "inspect"
    noised = viz.patching_figure(patch_heads(model, CLEAN, LONGER, direction="noise"), words=figure_words("zh"))
    assert noised.title.text == text("figure.patching_title_noise", "zh")
    assert noised.select_one({"name": "cells"}).data_source.data["share_tip"][0] == text(
        "figure.patching_not_patched", "zh"
    )
    with pytest.raises(AttnlabError, match="^patching_figure draws what attnlab's head patching returns, got dict$"):
        viz.patching_figure({})
    flat = HeadPatching(np.zeros((2, 3)), np.zeros((2, 3)), 0.0, -1.0, "denoise", [0], ("cross",))
    with pytest.raises(AttnlabError, match=r"shares of shape \(3 kinds, layers, heads\)"):
        viz.patching_figure(flat)


def test_the_colour_scale_stops_at_one() -> None:
    """One head that overshoots (a share of 3) is drawn at the end of a ±1 scale, so the others
    keep their colours; a figure whose largest share is 0.2 spreads its colours over ±0.2."""
    share = np.full((3, 1, 2), 0.1)
    share[2, 0, 1] = 3.0
    overshoot = viz.patching_figure(
        HeadPatching(share, share, 0.0, -1.0, "noise", [0], ("encoder", "decoder", "cross"))
    )
    mapper = overshoot.select_one({"name": "cells"}).glyph.fill_color.transform
    assert (mapper.low, mapper.high) == (-1.0, 1.0)
    assert overshoot.select_one({"name": "cells"}).data_source.data["label"][-1] == "3.00"
    share[2, 0, 1], share[2, 0, 0] = -0.2, 0.2
    small = viz.patching_figure(HeadPatching(share, share, 0.0, -1.0, "noise", [0], ("encoder", "decoder", "cross")))
    mapper = small.select_one({"name": "cells"}).glyph.fill_color.transform
    assert (mapper.low, mapper.high) == pytest.approx((-0.2, 0.2))
    colors = cell_colors(small)
    assert colors[-1] != colors[-2] and colors[-1] == mapper.palette[0]  # -0.2 and +0.2: the two ends
    assert one_line(small.title.text) == viz.WORDS["patching.title_noise"]


def test_a_share_that_rounds_to_zero_is_written_without_a_minus() -> None:
    """A head or layer that moved nothing read "-0.00" (a float's -0.004): a share the other way
    to the eye. Both grids write it 0.00, and keep the minus where the share shows one."""
    kinds = ("encoder", "decoder", "cross")
    share = np.array([[[-0.004, 0.004]], [[-0.006, np.nan]], [[0.0, -0.0]]])
    heads = viz.patching_figure(HeadPatching(share, share, 0.0, -1.0, "noise", [0], kinds))
    assert heads.select_one({"name": "cells"}).data_source.data["label"] == [
        "0.00",
        "0.00",
        "-0.01",
        "–",
        "0.00",
        "0.00",
    ]
    layers = np.array([[-0.004, 1.0], [-0.2, -0.0]])
    result = ResidualPatching(layers, layers, -1.0, -2.0, "denoise", [0, 1], ["▁A", "▁b"], ["▁A", "▁c"], ["▁X", "▁Y"])
    fig = viz.residual_patching_figure(result)
    assert fig.select_one({"name": "cells"}).data_source.data["label"] == ["0.00", "1.00", "-0.20", "0.00"]


def test_a_long_title_wraps_over_the_cells_instead_of_widening_the_figure() -> None:
    """A one-line title set the grid's width: the Spanish residual grid of eight pieces was 1,100 px
    wide (cells stretched to 120 px) and ran past a 1400 px window. Both grids wrap it instead."""
    from attnlab.app.words import figure_words
    from attnlab.viz.cells import CELL, GAP, TITLE_MIN_PX

    spanish = figure_words("es")
    layers = np.zeros((2, 3))
    result = ResidualPatching(layers, layers, -1.0, -2.0, "denoise", [0, 1], ["▁A"] * 3, ["▁A"] * 3, ["▁X"] * 3)
    fig = viz.residual_patching_figure(result, words=spanish)
    assert fig.width <= TITLE_MIN_PX + 110 and "\n" in fig.title.text
    assert one_line(fig.title.text) == spanish["residual.title_denoise"].format(side=spanish["residual.encoder"])
    share = np.zeros((3, 1, 2))
    heads = viz.patching_figure(HeadPatching(share, share, 0.0, -1.0, "noise", [0], ("encoder", "decoder", "cross")))
    assert heads.width <= max((3 * (2 + GAP) - GAP) * CELL, TITLE_MIN_PX) + 130 and "\n" in heads.title.text
    # the cells no longer stretch under a title: a changed piece's label gets a cell as wide as it
    source, changed = ["▁A", "▁man", *["▁is"] * 8], ["▁A", "▁woman", *["▁is"] * 8]
    layers = np.zeros((2, 10))
    fig = viz.residual_patching_figure(ResidualPatching(layers, layers, -1.0, -2.0, "denoise", [0], source, changed))
    assert (fig.width - 110) / 10 >= 7 * len("▁man→▁woman")
    lens_like = viz.residual_patching_figure(
        ResidualPatching(layers, layers, -1.0, -2.0, "denoise", [0], ["▁klettert"] * 10, ["▁klettert"] * 10)
    )
    assert lens_like.width == 10 * 64 + 110  # pieces of 9 columns keep the 64 px cell (a 14-piece lens fits in 1400 px)


def axis_labels(fig: object, axis: str) -> list[str]:
    """An axis's tick labels, in order."""
    overrides = getattr(fig, axis)[0].major_label_overrides
    return [overrides[tick] for tick in sorted(overrides)]


def test_the_residual_figure_shows_each_layer_at_each_position(model: Model) -> None:
    """Encoder: the embeddings and each layer's output (bottom to top) × the clean source's pieces,
    the changed one labelled with what it became; decoder: each layer's output × the target's
    pieces; every cell its share, labelled, on a scale centred on 0; NaN grey, labelled "–"."""
    from bokeh.models import HoverTool

    from attnlab.app.i18n import text
    from attnlab.app.words import figure_words

    result = patch_residual(model, CLEAN, CORRUPTED)
    layers = model.config.n_layers
    fig = viz.residual_patching_figure(result, side="encoder")
    data = fig.select_one({"name": "cells"}).data_source.data
    np.testing.assert_array_equal(data["value"], result.encoder.ravel())
    assert data["label"] == [f"{v:.2f}".replace("-0.00", "0.00") for v in result.encoder.ravel()]
    n = len(result.source)
    np.testing.assert_array_equal(np.asarray(data["y"]) - 0.5, np.repeat(np.arange(layers + 1), n))  # 0 at the bottom
    assert axis_labels(fig, "yaxis") == ["embeddings", *(f"layer {i}" for i in range(layers))]
    assert axis_labels(fig, "xaxis") == ["▁A", "▁man→▁woman", *result.source[2:]]
    assert fig.name == "residual-patching-encoder"
    assert one_line(fig.title.text) == viz.WORDS["residual.title_denoise"].format(side="encoder")
    mapper = fig.select_one({"name": "cells"}).glyph.fill_color.transform
    assert mapper.low == -mapper.high == -min(np.abs(result.encoder).max(), 1.0)  # centred on 0
    colors = cell_colors(fig)
    changed = [colors[row * n + 1] for row in range(layers + 1)]  # the changed word carries it all, every row
    assert changed == [mapper.palette[-1]] * (layers + 1) and colors[0] != mapper.palette[-1]
    tips = dict(fig.select_one(HoverTool).tooltips)
    assert tips == {"residual stream": "@row", "source": "@piece", "share of the difference": "@share_tip"}
    assert (data["row"][n + 1], data["piece"][n + 1]) == ("layer 0", "▁man→▁woman")
    assert data["share_tip"][n + 1] == f"{result.encoder[1, 1]:+.3f}"

    decoder = viz.residual_patching_figure(result, side="decoder")
    data = decoder.select_one({"name": "cells"}).data_source.data
    np.testing.assert_array_equal(data["value"], result.decoder.ravel())
    assert data["label"] == [f"{v:.2f}".replace("-0.00", "0.00") for v in result.decoder.ravel()]
    assert axis_labels(decoder, "yaxis") == [f"layer {i}" for i in range(layers)]
    assert axis_labels(decoder, "xaxis") == result.target and decoder.name == "residual-patching-decoder"
    assert one_line(decoder.title.text) == viz.WORDS["residual.title_denoise"].format(side="decoder")
    assert decoder.xaxis[0].axis_label == "output" and decoder.yaxis[0].axis_label == "residual stream"

    longer = patch_residual(model, CLEAN, LONGER, direction="noise")  # the encoder's positions do not line up
    grey = viz.residual_patching_figure(longer, side="encoder", words=figure_words("es"), name="mine")
    data = grey.select_one({"name": "cells"}).data_source.data
    assert np.isnan(data["value"]).all() and set(data["label"]) == {"–"} and set(cell_colors(grey)) == {"#e0e0e0"}
    assert set(data["share_tip"]) == {text("figure.patching_not_patched", "es")}
    assert axis_labels(grey, "xaxis") == longer.source and grey.name == "mine"  # no arrow: nothing lines up
    assert one_line(grey.title.text) == text("figure.residual_title_noise", "es").format(
        side=text("kind.encoder", "es")
    )
    assert axis_labels(grey, "yaxis")[0] == text("figure.residual_embeddings", "es")


def test_the_residual_figure_labels_pieces_as_the_other_views_do() -> None:
    """A long changed piece is cut on the axis and whole in the hover, a right-to-left one is
    isolated on its own side of the arrow, pieces the result does not know are named by position,
    and what it cannot draw is one line."""
    share = np.array([[0.0, 1.0], [0.2, 0.8]])
    result = ResidualPatching(
        share, share, -1.0, -2.0, "denoise", [0, 1], ["▁A", "▁extraordinarily"], ["▁A", "▁שלום"], ["▁Ein"]
    )
    fig = viz.residual_patching_figure(result)
    assert axis_labels(fig, "xaxis") == ["▁A", "▁extra…→\u2068▁שלום\u2069"]
    assert fig.select_one({"name": "cells"}).data_source.data["piece"][1] == "▁extraordinarily→\u2068▁שלום\u2069"
    decoder = viz.residual_patching_figure(result, side="decoder")  # one target piece for two positions
    assert axis_labels(decoder, "xaxis") == ["0", "1"]
    with pytest.raises(AttnlabError, match="^side is 'encoder' or 'decoder', got 'cross'$"):
        viz.residual_patching_figure(result, side="cross")
    with pytest.raises(AttnlabError, match="^residual_patching_figure draws what attnlab's residual-stream patching"):
        viz.residual_patching_figure({})
    flat = ResidualPatching(np.zeros(3), share, -1.0, -2.0, "denoise", [0])
    with pytest.raises(AttnlabError, match=r"shares of shape \(layers, positions\)"):
        viz.residual_patching_figure(flat)


# -- path patching: the grids and the lines -----------------------------------------------------------------
SLEEPING = ("A man is sleeping on a bench.", "A woman is sleeping on a bench.")  # "Mann" (position 1) moves
SENDER = ("cross", 1, 1)


@pytest.fixture(scope="module")
def paths(model: Model) -> PathPatching:
    """Path patching on "Mann" with cross L1 H1, the head that moves most there, as the sender."""
    trace = model.translate(SLEEPING[0], record=True).trace
    found = trace_path_patching(model, trace, SLEEPING[1], positions=[1], sender=SENDER)
    assert found.total.order()[0] == SENDER  # (or the example moved: the numbers below are its)
    return found


def test_path_grids_show_each_part_on_the_totals_scale(paths: PathPatching) -> None:
    """Each part is head patching's grid of that part's shares, named and titled for it; all four
    reach the same colour at the same share (the total's scale), so a head's direct and indirect
    cells compare by colour; a tap names a head; words replace the titles."""
    from bokeh.events import Tap

    from attnlab.app.i18n import text
    from attnlab.app.words import figure_words
    from attnlab.viz.patching import share_scale

    top = share_scale(paths.total.share)
    assert share_scale(paths.direct.share) != top  # (or one scale would be each grid's own anyway)
    shares = {"total": paths.total, "direct": paths.direct, "indirect": paths.indirect, "receivers": paths.receivers}
    for part, patching in shares.items():
        fig = viz.path_patching_figure(paths, part)
        cells = fig.select_one({"name": "cells"})
        np.testing.assert_array_equal(cells.data_source.data["value"], patching.share.ravel())
        assert (cells.glyph.fill_color.transform.low, cells.glyph.fill_color.transform.high) == (-top, top)
        assert fig.name == f"path-patching-{part}"
    direct = viz.path_patching_figure(paths).select_one({"name": "cells"}).data_source.data
    np.testing.assert_array_equal(direct["value"], paths.direct.share.ravel())  # the default part
    assert paths.direct.share[0] == pytest.approx(0, abs=1e-5)  # an encoder head has no direct path
    indirect = viz.path_patching_figure(paths, "indirect").select_one({"name": "cells"}).data_source.data
    np.testing.assert_allclose(indirect["value"], (paths.total.share - paths.direct.share).ravel())
    assert one_line(viz.path_patching_figure(paths, "indirect").title.text) == viz.WORDS["paths.title_indirect"]
    picked: list[tuple[str, int, int]] = []
    fig = viz.path_patching_figure(paths, "direct", on_select=lambda *head: picked.append(head), name="mine")
    fig._trigger_event(Tap(fig, x=2 * 5 + 1.5, y=1.5))  # cross-attention, layer 1, head 1
    assert picked == [SENDER] and fig.name == "mine"
    zh = viz.path_patching_figure(paths, "direct", words=figure_words("zh"))
    assert one_line(zh.title.text) == text("figure.paths_title_direct", "zh")


def test_the_receivers_grid_greys_what_the_sender_does_not_reach_and_outlines_it(paths: PathPatching) -> None:
    """With a sender, each later head's share of its effect; the heads before it (and the encoder's,
    for a cross head) are grey and their hover says they are no receivers; the sender's own cell is
    framed and its hover names it; the title names it, in the page's words."""
    from attnlab.app.i18n import text
    from attnlab.app.words import figure_words
    from attnlab.viz.patching import NOT_PATCHED

    fig = viz.path_patching_figure(paths, "receivers")
    data = fig.select_one({"name": "cells"}).data_source.data
    values, colors = np.asarray(data["value"]), cell_colors(fig)
    missing = np.isnan(values)
    assert 0 < missing.sum() < len(values) - 4  # the decoder's layer 2 and the cross heads of layer 2 receive
    assert {c for c, gone in zip(colors, missing, strict=True) if gone} == {NOT_PATCHED}
    assert NOT_PATCHED not in [c for c, gone in zip(colors, missing, strict=True) if not gone]
    at = int(np.ravel_multi_index((2, 1, 1), paths.total.share.shape))
    tips = [t for i, (t, gone) in enumerate(zip(data["share_tip"], missing, strict=True)) if gone and i != at]
    assert set(tips) == {viz.WORDS["paths.not_receiver"]} and data["share_tip"][at] == viz.WORDS["paths.sender"]
    frame = fig.select_one({"name": "sender"})
    assert (frame.glyph.x, frame.glyph.y) == ("x", "y") and frame.glyph.fill_alpha == 0
    assert frame.data_source.data["x"] == [data["x"][at]] and frame.data_source.data["y"] == [data["y"][at]]
    assert one_line(fig.title.text) == viz.WORDS["paths.title_receivers"].format(sender="cross L1 H1")
    es = viz.path_patching_figure(paths, "receivers", words=figure_words("es"))
    sender = text("head.short", "es", kind=text("kind.cross", "es"), layer=1, head=1)
    assert one_line(es.title.text) == text("figure.paths_title_receivers", "es", sender=sender)
    assert es.select_one({"name": "cells"}).data_source.data["share_tip"][0] == text("figure.paths_not_receiver", "es")


def test_the_path_grids_refuse_in_one_line(paths: PathPatching) -> None:
    """Something other than path patching, a part that is not one, and the receivers of a result
    traced without a sender are each one line."""
    with pytest.raises(
        AttnlabError, match="^path_patching_figure draws what attnlab's path patching returns, got HeadPatching$"
    ):
        viz.path_patching_figure(paths.total)
    with pytest.raises(
        AttnlabError, match="^no part 'paths' of a path patching: choose from total, direct, indirect, receivers$"
    ):
        viz.path_patching_figure(paths, "paths")
    alone = replace(paths, sender=None, receivers=None, ffn=None)
    with pytest.raises(AttnlabError, match=r"^no receivers to draw: trace the path patching with a sender=\("):
        viz.path_patching_figure(alone, "receivers")
    assert viz.path_patching_figure(alone, "indirect").name == "path-patching-indirect"


def test_the_path_lines_split_the_senders_share_in_each_language(paths: PathPatching) -> None:
    """The sums of the direct and indirect shares; with a sender, its total split into direct and
    through later parts, the three largest receivers named (a fourth below 0.05 is not), the others
    summed, and what later parts do together; receivers named in the page's language; without a sender, the sums alone."""
    from attnlab.app.i18n import text
    from attnlab.app.patching_text import path_lines
    from attnlab.record.paths import node_name

    through = paths.through()
    assert abs(through[3][1]) < 0.05  # (or a fourth receiver would be named)
    total, direct = paths.total.share[2, 1, 1], paths.direct.share[2, 1, 1]
    en = path_lines(paths, "en")
    assert en[0] == text("paths.sums", direct=np.nansum(paths.direct.share), indirect=np.nansum(paths.indirect.share))
    named = ", ".join(f"{node_name(node)} {share:+.2f}" for node, share in through[:3])
    others = sum(share for _, share in through[3:])
    assert en[1] == (
        f"cross L1 H1 moves {total:+.2f}: {direct:+.2f} directly, {total - direct:+.2f} through later parts"
        f" — {named}, the others {others:+.2f}; later parts together {paths.rest:+.2f}."
    )
    # the named parts, the others and what they do together add up to what goes through later parts
    shares = [float(part.rsplit(" ", 1)[1]) for part in en[1].split(" — ")[1].rstrip(".").replace(";", ",").split(", ")]
    assert abs(sum(shares) - (total - direct)) <= 0.005 * len(shares)
    assert through[0][0] == ("ffn", "decoder", 1) and through[1][0] == ("decoder", 2, 1)  # (what es and zh name below)
    es, zh = path_lines(paths, "es"), path_lines(paths, "zh")
    assert "FFN del decodificador · capa 1 +0.29, decodificador · capa 2 · cabeza 1 +0.10" in es[1]
    assert es[1].startswith("cruzada · capa 1 · cabeza 1 mueve +0.66")
    assert "解码器 · 第 1 层前馈层 +0.29、解码器 · 第 2 层 · 头 1 +0.10" in zh[1] and zh[1].startswith(
        "交叉 · 第 1 层 · 头 1"
    )
    assert len(path_lines(replace(paths, sender=None, receivers=None, ffn=None), "zh")) == 1
    encoder = replace(paths, sender=("encoder", 0, 1))  # an encoder head's direct share is 0: no "-0.00"
    assert "-0.00" not in path_lines(encoder, "en")[1]


# -- the explorer's Head ablation tab ---------------------------------------------------------------------
def test_the_ablation_tab_patches_the_open_sentence_and_a_tap_picks_a_head(lab: dict[str, Path]) -> None:  # noqa: F811
    """Under the importance grid, a corrupted sentence and the button draw every head's share for
    the open output, name the head that moves most, and a tap on a cell adds that head to the heads
    to switch off; a corrupted sentence identical to the open one and an empty one are
    each one line, the figure gone."""
    from bokeh.events import Tap

    from attnlab.app.i18n import kind_title, text

    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs in the park .")  # (the example sentence is longer than the tiny model takes)
    shown.tabs.active = 4
    tab, store = shown.ablation.patching, shown.store
    assert tab.figure.object is None and tab.corrupted.placeholder == text(
        "ablation.patch_placeholder", sentence=store.text
    )
    tab.corrupted.value_input = "the cat runs in the park ."
    tab.direction.value = "noise"
    tab.run()
    fig = tab.figure.object
    expected = trace_patching(store.model, store.trace, "the cat runs in the park .", direction="noise")
    np.testing.assert_allclose(fig.select_one({"name": "cells"}).data_source.data["value"], expected.share.ravel())
    assert one_line(fig.title.text) == text("ablation.patch_title_noise")  # the box's words: no "clean", no "corrupted"
    assert one_line(tab.decoder.object.title.text) == text("ablation.residual_title_noise", side=text("kind.decoder"))
    kind, layer, head = expected.order()[0]
    share = expected.share[("encoder", "decoder", "cross").index(kind), layer, head]
    named = text("ablation.patch_head", kind=kind_title(kind), layer=layer, head=head)
    assert html.escape(text("ablation.patch_most_noise", head=named, share=share)) in tab.note.object
    assert "attn-patch-most" in tab.note.object and not store.error
    # one output piece's log-probability instead of the whole output's: the pieces of the open output offered
    pieces = store.trace.tgt_tokens
    assert list(tab.read.options.values()) == [-1, *range(len(pieces))] and tab.read.value == -1
    assert list(tab.read.options)[2] == text(
        "ablation.patch_read_piece", position=1, piece=viz.spelled(pieces)[1].lstrip("▁")
    )
    where = trace_residual_patching(store.model, store.trace, "the cat runs in the park .", direction="noise")
    k = int(np.argmax(np.abs(where.decoder[-1])))  # the piece the change moves most
    tab.read.value = k
    tab.run()
    one = trace_patching(store.model, store.trace, "the cat runs in the park .", positions=[k], direction="noise")
    np.testing.assert_allclose(
        tab.figure.object.select_one({"name": "cells"}).data_source.data["value"], one.share.ravel()
    )
    assert not np.allclose(one.share, expected.share, equal_nan=True)  # (or the test shows nothing)
    top = tab.decoder.object.select_one({"name": "cells"}).data_source.data["value"][-len(pieces) :]
    assert top[k] == pytest.approx(1) and np.delete(top, k) == pytest.approx(0, abs=1e-6)  # that piece alone is read
    tab.read.value = -1
    heads = store.model.config.n_heads
    for _ in range(2):
        fig._trigger_event(Tap(fig, x=2 * (heads + 1) + 1.5, y=0.5))  # cross-attention, layer 0, head 1
    assert shown.ablation.choice.value == ["cross L0 H1"]
    refusals = {
        store.text: "no difference for a head to carry",  # NoDifference
        "": text("ablation.patch_none"),
        "the dog runs . " * 200: "this model takes at most",  # a sentence the model cannot take
    }
    for corrupted, said in refusals.items():
        tab.corrupted.value_input = corrupted
        tab.run()
        assert tab.figure.object is None and said in html.unescape(tab.note.object), tab.note.object
        assert html.unescape(tab.note.object).count("\n") == 0 and "Traceback" not in tab.note.object
    store.model = load(lab["translate"], dtype="int8")  # its trace is the float model's: the same weights
    tab.corrupted.value_input = "the cat runs in the park ."
    tab.run()  # patching takes no gradient: an int8 model is patched too
    assert tab.figure.object is not None and "attn-patch-most" in tab.note.object, tab.note.object


def test_the_patching_box_splits_each_heads_share_by_path_when_ticked(
    lab: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off by default (a patching draws no path grid); ticked, the last patching is split at once:
    the direct and the indirect grid, the sender menu (the patched heads by the size of their total
    share, the largest chosen), its receivers and lines. Another sender from the menu, or a tap on
    a grid, redraws its receivers; the next patching (another piece, the other direction) is split
    too; attribution patching draws the rest and says paths are measured only; a refusal is the
    part's one line; unticked, it is gone."""
    from bokeh.events import Tap

    from attnlab.app.explorer import paths as paths_box
    from attnlab.app.i18n import text
    from attnlab.app.patching_text import path_lines

    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 4
    box, store, changed = shown.ablation.patching, shown.store, "the cat runs in the park ."
    part = box.paths
    box.corrupted.value_input = changed
    box.run()
    assert box.figure.object is not None and part.direct.object is None and not part.sender.visible
    part.split.value = True  # ticked after a patching: split at once
    patching = trace_patching(store.model, store.trace, changed)
    share = {h: patching.share[KINDS.index(h[0]), h[1], h[2]] for h in patching.order()}
    heads = sorted(share, key=lambda h: -abs(share[h]))
    assert part.sender.visible and part.sender.values == heads and part.sender.value == heads[0]
    expected = trace_path_patching(store.model, store.trace, changed, sender=heads[0])
    grids = {"direct": part.direct, "indirect": part.indirect, "receivers": part.receivers}
    for name, pane in grids.items():
        assert pane.object.name == f"path-patching-{name}"
        values = pane.object.select_one({"name": "cells"}).data_source.data["value"]
        np.testing.assert_allclose(values, getattr(expected, name).share.ravel(), atol=1e-6)
    assert part.lines.object == "".join(
        f"<p class='attn-paths-line'>{html.escape(line)}</p>" for line in path_lines(expected, "en")
    )
    first = f"{heads[0][0]} L{heads[0][1]} H{heads[0][2]}"
    assert list(part.sender.options)[0] == text("ablation.paths_sender_option", head=first, share=share[heads[0]])
    # another sender: from the menu, then by a tap on the indirect grid (cross-attention, layer 0, head 2)
    part.sender.value = heads[1]
    again = trace_path_patching(store.model, store.trace, changed, sender=heads[1])
    receivers = part.receivers.object.select_one({"name": "cells"}).data_source.data["value"]
    np.testing.assert_allclose(receivers, again.receivers.share.ravel(), atol=1e-6)
    assert html.escape(path_lines(again, "en")[1]) in part.lines.object
    heads_per_kind = store.model.config.n_heads
    grid = part.indirect.object
    grid._trigger_event(Tap(grid, x=2 * (heads_per_kind + 1) + 2.5, y=0.5))
    assert part.sender.value == ("cross", 0, 2) and part.receivers.object.select_one({"name": "sender"}) is not None
    assert shown.ablation.choice.value == []  # a tap here picks a sender, not a head to switch off
    # the next patching: one piece, the other direction
    where = trace_residual_patching(store.model, store.trace, changed, direction="noise")
    k = int(np.argmax(np.abs(where.decoder[-1])))  # the piece the change moves most
    box.read.value, box.direction.value = k, "noise"
    box.run()
    noised = trace_path_patching(store.model, store.trace, changed, positions=[k], direction="noise")
    np.testing.assert_allclose(
        part.direct.object.select_one({"name": "cells"}).data_source.data["value"],
        noised.direct.share.ravel(),
        atol=1e-6,
    )
    box.method.value = "attribution"
    box.run()
    assert box.figure.object is not None and part.direct.object is None and part.receivers.object is None
    assert html.escape(text("ablation.paths_measured")) in part.note.object and not part.sender.visible
    box.method.value = "activation"

    def refuse(*args: object, **kwargs: object) -> None:
        raise AttnlabError("the paths cannot be traced here")

    monkeypatch.setattr(paths_box, "trace_path_patching", refuse)
    box.run()
    assert box.figure.object is not None and part.direct.object is None
    said = store.explain(AttnlabError("the paths cannot be traced here"))
    assert part.note.object == f"<p class='attn-paths-error'>{html.escape(said)}</p>" and "\n" not in said
    monkeypatch.undo()
    box.run()
    assert part.direct.object is not None and not part.note.object
    part.split.value = False
    assert part.direct.object is part.indirect.object is part.receivers.object is None and not part.sender.visible
    box.run()
    assert part.direct.object is None and box.figure.object is not None


def test_the_path_part_draws_the_circuit_and_its_menus_redraw_it(
    lab: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ticked, a patching also draws the circuit under the receivers grid: its curves and nodes are
    `trace_circuit`'s for the same sentences, direction and piece, with the menus' heads (4) and
    smallest path (0.05). Another number of heads or smallest path redraws it with those; a refusal
    is the circuit's one line, the grids above it staying; unticked, it goes."""
    from attnlab.app.explorer import circuit as circuit_box
    from attnlab.record.circuit import trace_circuit

    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 4
    box, store, changed = shown.ablation.patching, shown.store, "the cat runs in the park ."
    part = box.paths.circuit
    where = trace_residual_patching(store.model, store.trace, changed, direction="noise")
    k = int(np.argmax(np.abs(where.decoder[-1])))  # the piece the change moves most
    box.corrupted.value_input, box.read.value, box.direction.value = changed, k, "noise"
    box.paths.split.value = True
    box.run()
    assert part.layout.visible and (part.senders.value, part.threshold.value) == (4, 0.05)

    def drawn_as(senders: int, threshold: float) -> None:
        expected = trace_circuit(
            store.model, store.trace, changed, positions=[k], direction="noise", senders=senders, threshold=threshold
        )
        assert len(expected.edges) >= 2 and len(expected.senders) == senders  # (or the menus change little)
        fig, own = part.figure.object, viz.circuit_figure(expected, words=store.words)
        assert fig.name == "circuit" and not part.note.object
        for name in ("paths", "nodes"):
            data, want = (f.select_one({"name": name}).data_source.data for f in (fig, own))
            assert data.keys() == want.keys()
            for key, value in want.items():  # names and hovers as written, places and widths to rounding
                if isinstance(value[0], str):
                    assert list(data[key]) == list(value), (name, key)
                else:
                    np.testing.assert_allclose(np.array(data[key], float), np.array(value, float), err_msg=key)
        assert len(fig.select_one({"name": "paths"}).data_source.data["tip"]) == len(expected.edges)

    drawn_as(4, 0.05)
    part.senders.value = 2
    drawn_as(2, 0.05)
    part.threshold.value = 0.02
    drawn_as(2, 0.02)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AttnlabError("no circuit here")

    monkeypatch.setattr(circuit_box, "trace_circuit", refuse)
    part.senders.value = 3
    said = store.explain(AttnlabError("no circuit here"))
    assert part.note.object == f"<p class='attn-circuit-error'>{html.escape(said)}</p>" and part.figure.object is None
    assert box.paths.direct.object is not None and box.paths.receivers.object is not None
    monkeypatch.undo()
    part.threshold.value = 0.05
    drawn_as(3, 0.05)
    box.paths.split.value = False
    assert part.figure.object is None and not part.layout.visible
    part.senders.value = 5  # nothing asked: nothing drawn
    assert part.figure.object is None and not part.layout.visible


def test_the_patching_box_shows_where_the_difference_sits(lab: dict[str, Path]) -> None:  # noqa: F811
    """The same button patches the residual stream: under the head grid, a line saying where the
    difference sits and the encoder's and the decoder's grids of the open output; a changed sentence
    with more pieces leaves the encoder unpatched, said in the line, and only the decoder's grid
    shown; a refusal or a new sentence takes them away."""
    from attnlab.app.i18n import text

    shown = explorer(lab, tiny="translate")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 4
    tab, store = shown.ablation.patching, shown.store
    assert tab.encoder.object is tab.decoder.object is None and not tab.where.object
    tab.corrupted.value_input = "the man runs in the park ."  # as many pieces ("▁dog", "▁man")
    tab.run()
    expected = trace_residual_patching(store.model, store.trace, "the man runs in the park .")
    assert expected.encoder_patched
    for pane, side in ((tab.encoder, "encoder"), (tab.decoder, "decoder")):
        fig = pane.object
        assert fig.name == f"residual-patching-{side}", fig.name
        values = fig.select_one({"name": "cells"}).data_source.data["value"]
        np.testing.assert_allclose(values, getattr(expected, side).ravel())
    assert tab.figure.object.name == "head-patching" and tab.where.object.count("<p") == 1
    assert tab.where.object == tab._where(expected)
    where = html.unescape(tab.where.object)
    assert re.search(r"In the encoder the change (stays at|spreads out from) 'dog' ", where), where
    assert re.search(r"in the output it lands on '[^']+' \(-?\d+%\) and '[^']+' \(-?\d+%\)\.", where), where

    tab.corrupted.value_input = "the cat runs in the park ."  # more pieces: the encoder's positions do not line up
    tab.run()
    longer = trace_residual_patching(store.model, store.trace, "the cat runs in the park .")
    assert not longer.encoder_patched
    assert tab.encoder.object is None and tab.decoder.object.name == "residual-patching-decoder"
    where = html.unescape(tab.where.object)
    assert where.startswith("<p") and where.count("<p") == 1 and "\n" not in where
    assert "encoder's positions are not patched; in the output the change lands on '" in where, where

    tab.method.value = (
        "attribution"  # every patch estimated from one gradient: said under the numbers and in each title
    )
    tab.corrupted.value_input = "the man runs in the park ."
    tab.run()
    guess = trace_residual_patching(store.model, store.trace, "the man runs in the park .", method="attribution")
    values = tab.decoder.object.select_one({"name": "cells"}).data_source.data["value"]
    np.testing.assert_allclose(values, guess.decoder.ravel())
    assert not np.allclose(guess.decoder, expected.decoder)  # (or the test shows nothing)
    assert html.escape(text("ablation.patch_estimated")) in tab.note.object
    estimate = text("ablation.patch_estimate_of", said="")  # the two lines that name what moved, marked
    assert f"<b>{html.escape(estimate)}" in tab.note.object and f">{html.escape(estimate)}" in tab.where.object
    for fig in (tab.figure.object, tab.encoder.object, tab.decoder.object):
        assert one_line(fig.title.text).startswith(text("figure.patching_estimated", title="")), fig.title.text
    tab.method.value = "activation"

    tab.corrupted.value_input = store.text  # no difference: one line, every grid gone
    tab.run()
    assert tab.encoder.object is tab.decoder.object is None and not tab.where.object
    assert "no difference for a head to carry" in html.unescape(tab.note.object)
    tab.corrupted.value_input = "the man runs in the park ."
    tab.run()
    assert tab.encoder.object is not None and tab.decoder.object is not None
    decode(shown, "a cat runs .")  # a new sentence: the grids of the last one go
    assert tab.encoder.object is tab.decoder.object is None and not tab.where.object
    assert text("ablation.residual_no_encoder", "zh", lands="x")  # (the key exists in every language)


def test_the_line_says_where_the_difference_sits_from_the_numbers(lab: dict[str, Path]) -> None:  # noqa: F811
    """The encoder: the share of its top row at the changed piece (it stays there from half up, else
    it has spread); the output: the two pieces of the decoder's top row with the largest shares."""
    tab = explorer(lab, tiny="translate").ablation.patching
    decoder = np.array([[0.1, 0.0, 0.0], [0.57, 0.44, -0.01]])
    pieces = (["▁A", "▁man", "</s>"], ["▁A", "▁woman", "</s>"], ["▁Ein", "▁Mann", "</s>"])
    stays = ResidualPatching(np.array([[0, 1.0, 0], [0, 1.0, 0]]), decoder, -1.0, -3.0, "denoise", [0], *pieces)
    assert html.unescape(tab._where(stays)) == (
        "<p class='attn-patch-where-line'>In the encoder the change stays at 'man' up to the top layer (100% of the "
        "difference there); in the output it lands on 'Ein' (57%) and 'Mann' (44%).</p>"
    )
    spread = replace(stays, encoder=np.array([[0, 1.0, 0], [0.3, 0.2, 0.5]]))
    assert html.unescape(tab._where(spread)).startswith(
        "<p class='attn-patch-where-line'>In the encoder the change spreads out from 'man' (only 20% of the "
        "difference is still there at the top layer); in the output it lands on 'Ein' (57%) and 'Mann' (44%)."
    )
    unpatched = replace(stays, encoder=np.full((2, 3), np.nan), changed=["▁A", "▁young", "▁woman", "</s>"])
    said = html.unescape(tab._where(unpatched))
    assert "not patched; in the output the change lands on 'Ein' (57%) and 'Mann' (44%).</p>" in said
    one = replace(stays, decoder=np.ones((2, 1)), target=["</s>"])
    assert html.unescape(tab._where(one)).endswith("in the output it lands on '</s>' (100%).</p>")
    alone = replace(stays, decoder=np.array([[0.1, 0.0, 0.0], [1.0, 0.004, -0.004]]))  # "and 'Mann' (0%)" said nothing
    assert html.unescape(tab._where(alone)).endswith("in the output it lands on 'Ein' (100%).</p>")


def test_the_compare_tab_patches_both_models_on_the_changed_sentence(lab: dict[str, Path]) -> None:  # noqa: F811
    """Its fourth box patches each model's residual stream against the sentence typed in the Head
    ablation tab, the second model on the first one's output: the encoder's grid of each, which
    differ between a global and a restricted model; with nothing typed, or a change that moves
    nothing, no grid and one line why."""
    from attnlab.app.i18n import text

    shown = explorer(lab, tiny="translate", restricted="restricted")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 5
    tab = shown.compare
    tab.second.value = "restricted"
    tab.patchings.value = True  # nothing typed yet
    assert all(p.object is None for p in tab.patching_panes) and tab.notice.visible
    assert text("compare.patch_none") in html.unescape(tab.notice.object)
    shown.ablation.patching.corrupted.value_input = "the man runs in the park ."  # as many pieces
    tab.draw(again=True)
    c, grids = tab.comparison, []
    sides = ((shown.store.model, c.first.trace), (tab.second_model, c.second_on_first.trace))
    for pane, (model, trace), name in zip(tab.patching_panes, sides, ("A", "B"), strict=True):
        expected = trace_residual_patching(model, trace, "the man runs in the park .")
        grids.append(pane.object.select_one({"name": "cells"}).data_source.data["value"])
        np.testing.assert_allclose(grids[-1], expected.encoder.ravel())
        assert one_line(pane.object.title.text) == text("compare.patching_title", name=name, side=text("kind.encoder"))
    assert not np.allclose(*grids) and not tab.notice.visible  # two models, two answers
    box = shown.ablation.patching.corrupted  # edited there (as a browser sends it): redrawn here, not stale
    box.value_input = box.value = "the cat runs in the park ."
    expected = trace_residual_patching(shown.store.model, c.first.trace, "the cat runs in the park .")
    assert not expected.encoder_patched  # (more pieces: the decoder's grid)
    values = tab.patching_panes[0].object.select_one({"name": "cells"}).data_source.data["value"]
    np.testing.assert_allclose(values, expected.decoder.ravel())
    title = text("compare.patching_title", name="A", side=text("kind.decoder"))
    assert one_line(tab.patching_panes[0].object.title.text) == title
    shown.ablation.patching.corrupted.value_input = shown.store.text  # no difference: one line, no grid
    tab.draw(again=True)
    assert all(p.object is None for p in tab.patching_panes) and tab.notice.visible
    assert "no difference for a head to carry" in html.unescape(tab.notice.object)
    assert tab.comparison is not None and tab.panes[0].object is not None  # the rest of the tab still shows


def circuit_tips(fig: object) -> list[str]:
    """A circuit figure's paths and nodes as their hovers name them ("cross L1 H1 → output: +0.290",
    "cross L1 H1: total +0.310, direct +0.290")."""
    return [tip for name in ("paths", "nodes") for tip in fig.select_one({"name": name}).data_source.data["tip"]]


def test_the_compare_tabs_circuit_menus_redraw_both_circuits(lab: dict[str, Path]) -> None:  # noqa: F811
    """The sixth box's two menus are the Head ablation tab's circuit's (the same words, 4 and 0.05 at
    first), shown while it is ticked; either redraws both models' circuits with what they say."""
    from attnlab.app.i18n import text
    from attnlab.record.circuit import trace_circuit

    shown = explorer(lab, tiny="translate", restricted="restricted")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 5
    tab, changed = shown.compare, "the cat runs in the park ."
    tab.second.value = "restricted"
    box, own = tab.circuits, shown.ablation.patching.paths.circuit
    assert not box.controls.visible  # unticked
    shown.ablation.patching.corrupted.value_input = changed
    box.show.value = True
    assert box.controls.visible and (box.senders.value, box.threshold.value) == (4, 0.05)
    for menu, same in ((box.senders, own.senders), (box.threshold, own.threshold)):
        assert (menu.name, menu.options) == (same.name, same.options)
    assert box.senders.name == text("ablation.circuit_senders")
    c = tab.comparison
    sides = ((shown.store.model, c.first.trace), (tab.second_model, c.second_on_first.trace))

    def drawn_as(senders: int, threshold: float) -> list[list[str]]:
        drawn = [circuit_tips(pane.object) for pane in box.panes]
        expected = [
            trace_circuit(model, trace, changed, senders=senders, threshold=threshold) for model, trace in sides
        ]
        assert drawn == [circuit_tips(viz.circuit_figure(circuit)) for circuit in expected]
        assert all(f"(≥ {threshold:.2f})" in one_line(pane.object.title.text) for pane in box.panes)
        return drawn

    first = [circuit_tips(pane.object) for pane in box.panes]  # (the defaults' circuits, which test_compare checks)
    box.threshold.value = 0.1
    coarser = drawn_as(4, 0.1)
    box.senders.value = 2
    fewer = drawn_as(2, 0.1)
    assert first != coarser != fewer  # (or the menus change nothing here)
    assert not tab.notice.visible
    box.show.value = False
    assert not box.controls.visible and all(pane.object is None for pane in box.panes)
    box.show.value = True
    tab.second.value = ""  # no second model (or one that cannot be compared): no menus over no circuit
    assert tab.comparison is None and not box.controls.visible


def test_the_compare_tab_says_each_refusal_once(
    lab: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fourth box (patching) and the sixth (circuits) refuse the same changed sentence in the
    same words: the tab's one notice says it once, and no box says it again. A box drawn again
    takes its own line out of the notice and leaves another box's that still holds."""
    import panel as pn

    from attnlab.app.explorer import compare as compare_tab
    from attnlab.app.explorer import compare_circuit
    from attnlab.app.i18n import text

    shown = explorer(lab, tiny="translate", restricted="restricted")
    decode(shown, "the dog runs in the park .")
    shown.tabs.active = 5
    tab, typed = shown.compare, shown.ablation.patching.corrupted
    tab.second.value = "restricted"

    def said(line: str) -> int:
        """How many times the tab's panes say `line`: its notice's and every box's."""
        panes = tab.layout.select(pn.pane.Markdown) + tab.layout.select(pn.pane.HTML)
        return sum(html.unescape(str(pane.object)).count(line) for pane in panes if pane.visible)

    tab.patchings.value = tab.circuits.show.value = True  # nothing typed yet
    assert tab.notice.visible and said(text("compare.patch_none")) == 1
    typed.value_input = typed.value = shown.store.text  # no difference
    assert all(pane.object is None for pane in (*tab.patching_panes, *tab.circuits.panes))
    nothing = tab.circuits.refused
    assert "no difference for a head to carry" in nothing and said(nothing) == 1

    def refusing(line: str) -> object:
        def refuse(*args: object, **kwargs: object) -> None:
            raise AttnlabError(line)

        return refuse

    monkeypatch.setattr(compare_tab, "compared_residual", refusing("no grid here"))
    monkeypatch.setattr(compare_circuit, "compared_circuit", refusing("no circuit here"))
    typed.value_input = typed.value = "the cat runs in the park ."  # two refusals, each once
    grid, circuit = (shown.store.explain(AttnlabError(line)) for line in ("no grid here", "no circuit here"))
    assert said(grid) == said(circuit) == 1 and said(nothing) == 0
    monkeypatch.undo()
    monkeypatch.setattr(compare_tab, "compared_residual", refusing("no grid here"))
    tab.circuits.senders.value = 2  # the circuits drawn: their line goes, the grid's stays
    assert all(pane.object is not None for pane in tab.circuits.panes)
    assert said(grid) == 1 and said(circuit) == 0 and tab.notice.visible


def test_the_notebook_compare_widgets_circuit_menus_redraw_both_and_a_refusal_is_one_line(
    lab: dict[str, Path],  # noqa: F811
) -> None:
    """`compare_models`' circuit box has the paths box's two menus, shown while it is ticked; either
    redraws both circuits with what it says. A change that moves nothing, refused by the patching
    box and the circuit box alike, is one line in the widget's error box, said once."""
    import ipywidgets as w
    from attnlab.widgets import compare_models

    from attnlab.app.circuit_widget import menus
    from attnlab.record.circuit import trace_circuit

    widget = compare_models(str(lab["translate"]), str(lab["restricted"]), text="the dog runs in the park .")
    box, changed = widget.circuits, "the cat runs in the park ."
    assert box.controls.layout.display == "none"  # unticked
    box.show.value = True
    widget.patch(changed)
    own = menus("en")
    for menu, same in zip((box.senders, box.threshold), own, strict=True):
        assert (menu.description, menu.options, menu.value) == (same.description, same.options, same.value)
    assert box.controls.layout.display is None and (box.senders.value, box.threshold.value) == (4, 0.05)
    c = widget.comparison
    sides = ((widget.first, c.first.trace), (widget.second, c.second_on_first.trace))

    def drawn_as(senders: int, threshold: float) -> list[list[str]]:
        drawn = [circuit_tips(widget.figures[f"circuit_{role}"]) for role in ("first", "second")]
        expected = [
            trace_circuit(model, trace, changed, senders=senders, threshold=threshold) for model, trace in sides
        ]
        assert drawn == [circuit_tips(viz.circuit_figure(circuit)) for circuit in expected]
        return drawn

    first = [circuit_tips(widget.figures[f"circuit_{role}"]) for role in ("first", "second")]
    box.threshold.value = 0.1
    coarser = drawn_as(4, 0.1)
    box.senders.value = 2
    fewer = drawn_as(2, 0.1)
    assert first != coarser != fewer and not widget.errors.message  # (or the menus change nothing here)

    def said(line: str) -> int:
        """How many times the widget's HTML says `line`: its error box's and every box's."""
        boxes, shown = [widget], []
        while boxes:
            child = boxes.pop()
            boxes += getattr(child, "children", ())
            shown += [child.value] if isinstance(child, w.HTML) else []
        return sum(html.unescape(value).count(line) for value in shown)

    widget.patch("the dog runs in the park .")  # no difference: both boxes refuse it
    assert widget.figures["patching_first"] is None and widget.figures["circuit_first"] is None
    assert "no difference for a head to carry" in widget.errors.message and said(widget.errors.message) == 1
    box.show.value = False
    assert box.controls.layout.display == "none"
