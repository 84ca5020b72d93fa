"""Colours and pixels shared by every view: the palettes, the kind names, the top of a map's
colour scale, block-averaging for long inputs, colouring through a palette, and the grey hatch
that marks the cells a mask forbade (never confused with a real zero, which is white).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from bokeh.palettes import Blues256, Category10, RdBu11

from attnlab.errors import AttnlabError
from attnlab.viz.words import WORDS

PALETTE = tuple(reversed(Blues256))  # 0 -> white, 1 -> dark blue
DIFF_PALETTE = tuple(RdBu11)  # negative blue, 0 white, positive red
MASK_LIGHT, MASK_DARK = (224, 224, 224), (150, 150, 150)  # hatch of forbidden cells
KIND_COLORS = {"encoder": Category10[3][0], "decoder": Category10[3][1], "cross": Category10[3][2]}
KIND_TITLES = {kind: WORDS[f"kind.{kind}"] for kind in KIND_COLORS}  # in English (a view's `words` may change them)


def color_scale(weights: np.ndarray, vmax: float | None) -> float:
    """The top of a map's colour scale: `vmax`, or with None its largest finite weight (a NaN
    that a trace built in memory may hold would otherwise make the whole scale NaN). A `vmax` of
    0, below 0 or NaN drew a scale of nothing, silently; "1" was a TypeError deep in a view."""
    if vmax is not None:
        if isinstance(vmax, bool) or not isinstance(vmax, numbers.Real) or not 0 < vmax < math.inf:
            raise AttnlabError(f"vmax (the top of the colour scale) must be a number > 0, or None, got {vmax!r}")
        return float(vmax)
    finite = weights[np.isfinite(weights)]
    return max(float(finite.max()), 1e-9) if finite.size else 1.0


def choice_rows(weights: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The rows (queries) of `weights` that may attend to more than one key, for "scale to max":
    a row with one key (the decoder's first query sees only itself) is 1.0 by construction, so
    every causal map's maximum was 1 and the option changed nothing."""
    rows = allowed.sum(-1) > 1
    return weights[..., rows, :] if rows.any() else weights


def downsample(array: np.ndarray, max_side: int) -> np.ndarray:
    """Block-average the last two axes so neither exceeds `max_side` (blocks of ceil(n / max_side))."""
    q, k = array.shape[-2:]
    fq, fk = math.ceil(q / max_side), math.ceil(k / max_side)
    if fq == 1 and fk == 1:
        return array
    pad = [(0, 0)] * (array.ndim - 2) + [(0, -q % fq), (0, -k % fk)]
    padded = np.pad(array.astype(np.float64), pad, constant_values=np.nan)  # partial blocks average real cells only
    blocks = padded.reshape(padded.shape[:-2] + (padded.shape[-2] // fq, fq, padded.shape[-1] // fk, fk))
    return np.nanmean(blocks, axis=(-1, -3))


def colorize(weights: np.ndarray, vmin: float = 0.0, vmax: float = 1.0, palette: Sequence[str] = PALETTE) -> np.ndarray:
    """(q, k) values -> (q, k, 3) uint8 through a bokeh palette (as LinearColorMapper maps them)."""
    table = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in palette], dtype=np.uint8)
    span = (vmax - vmin) or 1.0
    position = np.nan_to_num((weights - vmin) / span, nan=0.0)  # NaN (a weight or the scale): the lowest colour
    index = np.clip(position * len(palette), 0, len(palette) - 1).astype(int)
    return table[index]


def hatch(rgb: np.ndarray, allowed: np.ndarray | None, cell: int) -> np.ndarray:
    """Upsample (q, k, 3) by `cell` pixels per cell and hatch the forbidden cells."""
    pixels = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1)
    if allowed is None or allowed.all():
        return pixels
    blocked = np.repeat(np.repeat(~allowed, cell, axis=0), cell, axis=1)
    yy, xx = np.indices(blocked.shape)
    stripes = (yy + xx) % max(3, cell // 2) == 0
    pixels = pixels.copy()
    pixels[blocked & stripes] = MASK_DARK
    pixels[blocked & ~stripes] = MASK_LIGHT
    return pixels


def rgba(rgb: np.ndarray, alpha: np.ndarray | None = None) -> np.ndarray:
    """(h, w, 3) uint8 -> (h, w) uint32 for `image_rgba`, rows flipped (bokeh draws row 0 at the bottom)."""
    h, w = rgb.shape[:2]
    out = np.empty((h, w, 4), dtype=np.uint8)
    out[..., :3] = rgb
    out[..., 3] = 255 if alpha is None else alpha
    return np.ascontiguousarray(out[::-1]).view(np.uint32).reshape(h, w)


def mask_overlay(allowed: np.ndarray) -> np.ndarray:
    """RGBA hatch over forbidden cells, transparent elsewhere, at a few pixels per cell."""
    q, k = allowed.shape
    cell = int(np.clip(400 // max(q, k), 1, 6))
    rgb = hatch(np.full((q, k, 3), 255, np.uint8), allowed, cell)
    blocked = np.repeat(np.repeat(~allowed, cell, axis=0), cell, axis=1)
    return rgba(rgb, np.where(blocked, 255, 0).astype(np.uint8))
