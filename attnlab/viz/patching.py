"""Head patching (`attnlab.record.patching`) as one grid, laid out as head importance is
(`cells.head_grid`: the three kinds side by side, each a block of layers, 0 at the bottom, ×
heads): every cell is the share of the clean/corrupted log-probability difference that head alone
moves, on a diverging scale centred on 0 (blue: towards the other run, as the direction asks; red:
the other way), labelled with the number. A head that was not patched (the encoder's, when the two
sources have a different number of pieces) is grey, labelled "–", and its hover says why. With
`on_select`, a tap on a cell hands its (kind, layer, head) to the caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
from bokeh.models import LinearColorMapper
from bokeh.palettes import Blues256, Reds256
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.trace import KINDS
from attnlab.viz.cells import head_grid, share_label
from attnlab.viz.colors import MASK_LIGHT
from attnlab.viz.options import check_options
from attnlab.viz.selection import check_on_select
from attnlab.viz.words import say

if TYPE_CHECKING:
    from attnlab.record.patching import HeadPatching

SHARE_PALETTE = (*Reds256, *reversed(Blues256))  # -top dark red, 0 white, +top dark blue (importance's blue)
NOT_PATCHED = "#{:02x}{:02x}{:02x}".format(*MASK_LIGHT)  # the grey of what a mask forbade: no number here
DARK = 0.55  # from this share of the scale's end out a cell is dark enough for white text


def share_scale(share: np.ndarray) -> float:
    """The colour scale's end, ±top: the largest |share|, but never beyond 1.

    The largest share sets the darkest colour so that the heads that carry most of the
    difference stand out even when each carries little (in a deep model the difference is
    spread over many heads, and a fixed ±1 scale left every cell nearly white). Past 1 the scale
    stops growing: 1 already means "this head alone moves all of it", and one head that
    overshoots (a share of 3) would otherwise pale every other head; it is drawn at the end
    of the scale and its label gives the number. NaN (not patched) is left out."""
    finite = np.abs(share[np.isfinite(share)])
    return min(max(float(finite.max()), 1e-12), 1.0) if finite.size else 1.0


def estimated(result: object, title: str, said: Mapping[str, str]) -> str:
    """A view's own title, said to be an estimate where the shares are attribution patching's
    (first-order estimates, which can be far from the measured shares: docs/EXPERIMENTS.md)."""
    return said["patching.estimated"].format(title=title) if getattr(result, "method", "") == "attribution" else title


def patching_figure(
    patching: HeadPatching,
    *,
    title: str | None = None,
    name: str = "head-patching",
    on_select: Callable[[str, int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
    scale: float | None = None,
) -> figure:
    """Every head's share of the difference (`patching.share`), the hover adding the nats it
    moved. `title` None is its own (it names the direction); `on_select(kind, layer, head)` is
    called when a cell is tapped (in a Bokeh server or Panel session); `words` replaces any of
    `viz.words.WORDS` ("patching.*", "kind.*"); `scale` is the share the colours reach at either
    end (None: this grid's own, `share_scale`), so that grids drawn side by side (path patching's
    direct and indirect shares) can be read on one scale."""
    check_options(title=title)
    if scale is not None and not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise AttnlabError(f"scale (the share the colours reach) is a number > 0, got {scale!r}")
    check_on_select(on_select, "(kind, layer, head)")
    share = getattr(patching, "share", None)
    if not (hasattr(patching, "order") and isinstance(share, np.ndarray)):
        raise AttnlabError(f"patching_figure draws what attnlab's head patching returns, got {type(patching).__name__}")
    if (
        share.ndim != 3
        or share.shape[0] != len(KINDS)
        or getattr(patching, "direction", None) not in ("denoise", "noise")
    ):
        raise AttnlabError(
            f"patching_figure draws shares of shape (3 kinds, layers, heads) patched to denoise or noise, "
            f"got {share.shape} and direction {getattr(patching, 'direction', None)!r}"
        )
    said = say(words)
    values, nats = share.ravel(), np.asarray(patching.nats, dtype=float).ravel()
    top = scale or share_scale(share)
    missing = np.isnan(values)
    mapper = LinearColorMapper(palette=list(SHARE_PALETTE), low=-top, high=top, nan_color=NOT_PATCHED)
    return head_grid(
        share,
        [share_label(v) for v in values],
        [
            "#666666" if gone else "white" if abs(v) / top >= DARK else "#222222"
            for v, gone in zip(values, missing, strict=True)
        ],
        mapper,
        title=title or estimated(patching, said[f"patching.title_{patching.direction}"], said),
        name=name,
        words=said,
        axes=(said["patching.layer"], said["patching.head"]),
        tips=[(said["patching.share"], "@share_tip"), (said["patching.nats"], "@nats_tip")],
        columns={
            "share_tip": [
                said["patching.not_patched"] if gone else f"{v:+.3f}" for v, gone in zip(values, missing, strict=True)
            ],
            "nats_tip": ["–" if gone else f"{n:+.3f}" for n, gone in zip(nats, missing, strict=True)],
        },
        on_select=on_select,
    )
