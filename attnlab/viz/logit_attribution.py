"""Direct logit attribution (`attnlab.record.logit_attribution`) for one output piece, in two
figures. The grid (`cells.block_grid`): decoder layers bottom to top × the decoder's
self-attention heads, its encoder–decoder heads and its feed-forward layer, each cell the share of
the piece's logit (less what it is read against) that part wrote directly, on patching's diverging
scale centred on 0 (blue: for the piece; red: against it), symmetric about the largest share and
labelled with the number; the hover of an encoder–decoder head names the source pieces it read most
into that share. The bars (`logit_source_figure`): the encoder–decoder heads' shares summed over
layers and heads and split by source piece, which says which words of the input the decoder read
directly into the piece. The embedding, position and bias shares are the rest of the sum: the
screens say them in a line beside the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, LinearColorMapper, Range1d, Span
from bokeh.palettes import Blues9, Reds9
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.viz.axes import token_axis
from attnlab.viz.cells import block_grid, block_starts, fitted_title, share_label
from attnlab.viz.fonts import use_fonts
from attnlab.viz.labels import piece_label, piece_word, spelled
from attnlab.viz.options import check_options
from attnlab.viz.patching import DARK, SHARE_PALETTE
from attnlab.viz.words import kind_title, say

if TYPE_CHECKING:
    from attnlab.record.logit_attribution import LogitAttribution

READS = 3  # source pieces an encoder–decoder head's hover names
FOR, AGAINST = Blues9[2], Reds9[2]  # a bar for the piece, one against it: the grid's two sides
BAR_PX = 28  # pixels a source piece's bar takes, between the figure's narrowest and widest


def logit_attribution_figure(
    attribution: LogitAttribution,
    position: int,
    *,
    title: str | None = None,
    name: str = "logit-attribution",
    words: Mapping[str, str] | None = None,
    scale: float | None = None,
) -> figure:
    """Each decoder part's direct share of the logit of the piece output at `position` (a negative
    one counts from the end): rows are decoder layers (0 at the bottom), columns the self-attention
    heads, the encoder–decoder heads and the feed-forward layer. `title` None is its own (it names
    the piece, what its logit is read against, and the logit); `words` replaces any of
    `viz.words.WORDS` ("attribution.*", "head.title", "kind.*"); `scale` is the share the colours
    reach at either end (None: this piece's largest, `attribution_scale`), so that two grids shown
    side by side can be read on one scale."""
    check_options(title=title)
    if scale is not None and not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise AttnlabError(f"scale (the share the colours reach) is a number > 0, got {scale!r}")
    position = checked(attribution, position, "logit_attribution_figure")
    said = say(words)
    n_layers, n_heads = attribution.self_heads.shape[:2]
    starts = block_starts([n_heads, n_heads, 1])
    x, y, values, parts, reads = [], [], [], [], []
    for block, (kind, shares) in enumerate((("decoder", attribution.self_heads), ("cross", attribution.cross_heads))):
        for layer, head in np.ndindex(n_layers, n_heads):
            x.append(starts[block] + head + 0.5)
            y.append(layer + 0.5)
            values.append(float(shares[layer, head, position]))
            parts.append(said["head.title"].format(kind_title=kind_title(kind, said), layer=layer, head=head))
            read = attribution.cross_source[layer, head, position] if kind == "cross" else None
            reads.append("–" if read is None else _most_read(read, spelled(attribution.source)))
    for layer in range(n_layers):
        x.append(starts[2] + 0.5)
        y.append(layer + 0.5)
        values.append(float(attribution.ffn[layer, position]))
        parts.append(said["attribution.ffn_part"].format(layer=layer))
        reads.append("–")
    top = scale or attribution_scale(attribution, position)  # the scale is symmetric: 0 is white
    source = ColumnDataSource(
        {
            "x": x,
            "y": y,
            "value": values,
            "label": [share_label(v, 1) for v in values],
            "text_color": ["white" if abs(v) / top >= DARK else "#222222" for v in values],
            "part": parts,
            "share_tip": [f"{v:+.3f}" for v in values],
            "reads": reads,
        }
    )
    heads = [str(h) for h in range(n_heads)]
    fig = block_grid(
        source,
        [(said["attribution.self"], heads), (said["attribution.cross"], heads), (said["attribution.ffn"], [""])],
        n_layers,
        LinearColorMapper(palette=list(SHARE_PALETTE), low=-top, high=top),
        title=title or attribution_title(attribution, position, words=words),
        name=name,
        axes=(said["attribution.layer"], said["attribution.head"]),
        tooltips=[("", "@part"), (said["attribution.share"], "@share_tip"), (said["attribution.reads"], "@reads")],
        value=said["attribution.share"],
        drag=said["grid.drag"],
    )
    return use_fonts(fig, said)


def attribution_scale(attribution: LogitAttribution, position: int) -> float:
    """The largest share in size of a head or feed-forward layer at `position`: where
    `logit_attribution_figure`'s colours end by default."""
    position = checked(attribution, position, "attribution_scale")
    parts = [
        attribution.self_heads[..., position],
        attribution.cross_heads[..., position],
        attribution.ffn[:, position],
    ]
    return max(max(float(np.abs(p).max()) for p in parts), 1e-12)


def logit_source_figure(
    attribution: LogitAttribution,
    position: int,
    *,
    title: str | None = None,
    name: str = "logit-source",
    words: Mapping[str, str] | None = None,
) -> figure:
    """The source pieces the encoder–decoder heads read directly into the logit of the piece output
    at `position` (`cross_source` summed over layers and heads): one bar a source piece, blue for
    the piece, red against it. `title` None is its own; `words` replaces any of `viz.words.WORDS`
    ("attribution.*")."""
    check_options(title=title)
    position = checked(attribution, position, "logit_source_figure")
    said = say(words)
    shares = attribution.cross_source[:, :, position].sum((0, 1))  # (source positions,)
    n = len(shares)
    bars_px = int(np.clip(n * BAR_PX, 360, 560))
    piece = piece_word(spelled(attribution.produced)[position])
    own = said["attribution.source_title"].format(piece=piece, total=float(shares.sum()))
    wrapped, title_width, title_lines = fitted_title(title or own, bars_px)
    low, high = min(0.0, float(shares.min())), max(0.0, float(shares.max()))
    room = 0.1 * max(high - low, 1e-12)  # above and below the bars: the zero line is always in view
    fig = figure(
        width=max(bars_px, title_width) + 80,
        height=260 + title_lines,
        x_range=Range1d(0, n),
        y_range=Range1d(low - room, high + room),
        tools="save",
        toolbar_location=None,
        title=wrapped,
        name=name,
    )
    source = ColumnDataSource(
        {
            "x": np.arange(n) + 0.5,
            "share": shares,
            "color": [FOR if v >= 0 else AGAINST for v in shares],
            "piece": [piece_label(p, None) for p in spelled(attribution.source)],
            "share_tip": [f"{v:+.3f}" for v in shares],
        }
    )
    bars = fig.vbar(x="x", top="share", width=0.7, source=source, color="color", name="bars")
    fig.add_layout(Span(location=0, dimension="width", line_color="#888888", line_width=1))
    fig.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[(said["attribution.source"], "@piece"), (said["attribution.share"], "@share_tip")],
        )
    )
    token_axis(fig.xaxis[0], spelled(attribution.source), bars_px, flip=False)
    fig.xaxis.major_label_orientation = math.pi / 2
    fig.xaxis.axis_label = said["attribution.source"]
    fig.yaxis.axis_label = said["attribution.share"]
    fig.grid.visible = False
    return use_fonts(fig, said)


def checked(attribution: object, position: object, caller: str) -> int:
    """`position` as an index into `attribution`'s output pieces (a negative one counts from the
    end), or one line: what is not a `LogitAttribution`, a position it does not have."""
    arrays = ("self_heads", "cross_heads", "ffn", "cross_source", "logit")
    if not (
        all(isinstance(getattr(attribution, a, None), np.ndarray) for a in arrays) and hasattr(attribution, "index")
    ):
        raise AttnlabError(f"{caller} draws what attnlab.logit_attribution returns, got {type(attribution).__name__}")
    return attribution.index(position)


def attribution_title(attribution: LogitAttribution, position: int, *, words: Mapping[str, str] | None = None) -> str:
    """The grid's own title: the piece, what its logit is read against, and the logit (a screen
    that names the model adds its name before it)."""
    said = say(words)
    piece, other = piece_word(spelled(attribution.produced)[position]), attribution.contrast[position]
    logit = float(attribution.logit[position])
    if not other:
        return said["attribution.title_mean"].format(piece=piece, position=position, logit=logit)
    against = "runner_up" if attribution.against == "runner-up" else "other"
    return said[f"attribution.title_{against}"].format(
        piece=piece, position=position, other=piece_word(spelled([other])[0]), logit=logit
    )


def _most_read(shares: np.ndarray, pieces: list[str]) -> str:
    """The `READS` source pieces with the largest share (either sign) of one head's, with theirs."""
    order = np.argsort(-np.abs(shares), kind="stable")[:READS]
    return ", ".join(f"{piece_label(pieces[i])} {share_label(shares[i])}" for i in order)
