"""Residual-stream patching (`attnlab.record.residual`) as a grid, one side of the model at a
time, laid out as the logit lens is (`cells.piece_grid`: layers bottom to top × pieces): every
cell is the share of the clean/corrupted difference that one layer's output at one position moves
alone, on head patching's diverging scale centred on 0 (`patching.SHARE_PALETTE`, `share_scale`;
blue: towards the other run, as the direction asks; red: the other way), labelled with the number.

The encoder's rows are the embeddings and then each layer's output, its columns the clean
source's pieces, a changed one labelled with what it became ("▁man→▁woman"): there a changed word
starts at its own position and spreads as the layers attend to it. The decoder's rows are its
layers' outputs, its columns the target's pieces: its top row splits the whole difference between
the pieces the change lands on. Encoder cells that were not patched (the two sources have a
different number of pieces, so positions do not line up) are grey, labelled "–", and their hover
says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import BasicTicker, ColorBar, ColumnDataSource, HoverTool, LinearColorMapper
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.cells import labelled_cells, piece_grid, share_label
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import change_label, piece_label, spelled
from attnlab.viz.options import check_options
from attnlab.viz.patching import DARK, NOT_PATCHED, SHARE_PALETTE, estimated, share_scale
from attnlab.viz.words import say

if TYPE_CHECKING:
    from attnlab.record.residual import ResidualPatching

SIDES = ("encoder", "decoder")


def residual_patching_figure(
    patching: ResidualPatching,
    *,
    side: str = "encoder",
    title: str | None = None,
    name: str | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """One side's grid of `patching` ("encoder": `patching.encoder`, "decoder": `patching.decoder`),
    the hover giving the row, the whole piece and the share. `title` None is its own (it names the
    side and the direction); `name` None is "residual-patching-<side>"; `words` replaces any of
    `viz.words.WORDS` ("residual.*", "patching.estimated"). Pieces the result does not know are named by position."""
    check_options(title=title)
    if side not in SIDES:
        raise AttnlabError(f"side is 'encoder' or 'decoder', got {side!r}")
    values = getattr(patching, side, None)
    if not (isinstance(values, np.ndarray) and hasattr(patching, "target") and hasattr(patching, "changed")):
        raise AttnlabError(
            f"residual_patching_figure draws what attnlab's residual-stream patching returns, "
            f"got {type(patching).__name__}"
        )
    direction = getattr(patching, "direction", None)
    if values.ndim != 2 or not values.size or direction not in ("denoise", "noise"):
        raise AttnlabError(
            f"residual_patching_figure draws shares of shape (layers, positions) patched to denoise or noise, "
            f"got {values.shape} and direction {direction!r}"
        )
    said = say(words)
    n_rows, n = values.shape
    axis, whole = _pieces(patching, side, n)
    rows = [said["residual.layer"].format(layer=layer) for layer in range(n_rows)]
    if side == "encoder":  # row 0 is what the first layer reads
        rows = [said["residual.embeddings"], *rows[:-1]]
    top = share_scale(values)
    row, position = (a.ravel() for a in np.meshgrid(np.arange(n_rows), np.arange(n), indexing="ij"))
    flat = values.ravel()
    missing = np.isnan(flat)
    source = ColumnDataSource(
        {
            "x": position + 0.5,
            "y": row + 0.5,
            "value": flat,
            "label": [share_label(v) for v in flat],
            "text_color": [
                "#666666" if gone else "white" if abs(v) / top >= DARK else "#222222"
                for v, gone in zip(flat, missing, strict=True)
            ],
            "row": [rows[r] for r in row],
            "piece": [whole[p] for p in position],
            "share_tip": [
                said["residual.not_patched"] if gone else f"{v:+.3f}" for v, gone in zip(flat, missing, strict=True)
            ],
        }
    )
    piece_word = said["residual.source" if side == "encoder" else "residual.output"]
    fig = piece_grid(
        rows,
        axis,
        title=title
        or estimated(patching, said[f"residual.title_{direction}"].format(side=said[f"residual.{side}"]), said),
        name=name or f"residual-patching-{side}",
        axes=(said["residual.stream"], piece_word),
        drag=said["residual.drag"],
    )
    mapper = LinearColorMapper(palette=list(SHARE_PALETTE), low=-top, high=top, nan_color=NOT_PATCHED)
    cells = labelled_cells(fig, source, "value", mapper, "11px", "values")
    fig.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[
                (said["residual.stream"], "@row"),
                (piece_word, "@piece"),
                (said["residual.share"], "@share_tip"),
            ],
        )
    )
    fig.add_layout(
        ColorBar(color_mapper=mapper, width=10, ticker=BasicTicker(desired_num_ticks=5), title=said["residual.share"]),
        "right",
    )
    return use_fonts(fig, said)


def _pieces(patching: ResidualPatching, side: str, n: int) -> tuple[list[str], list[str]]:
    """The `n` columns' pieces as the axis shows them and whole (for the hover): the target's on
    the decoder side; on the encoder side the clean source's, a changed one as "before→after"
    where both sources are known and as long. By position where the pieces are not known. Byte
    pieces are named by the character they spell (`spelled`: "<0x35>→<0x36>" read "5→6")."""
    pieces = list(patching.source if side == "encoder" else patching.target)
    if len(pieces) != n:
        return [str(i) for i in range(n)], [str(i) for i in range(n)]
    changed = list(patching.changed) if side == "encoder" and len(patching.changed) == n else pieces
    named = list(zip(pieces, changed, spelled(pieces), spelled(changed), strict=True))
    return (
        [piece_label(s) if a == b else change_label(s, t) for a, b, s, t in named],
        [piece_label(s, None) if a == b else change_label(s, t, None) for a, b, s, t in named],
    )
