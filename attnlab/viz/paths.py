"""Path patching (`attnlab.record.paths`) as head grids, drawn as head patching's
(`patching.patching_figure`): one grid per part of a result. The total is activation patching (each
head alone, everything after it recomputed); the direct part, what each head moves straight to the
output with every other head and feed-forward layer frozen; the indirect part, the total less the
direct (what goes through later parts). For one sender head, the receivers grid shows the share of
its effect that goes through each later head; the heads that do not read what it writes are grey,
and the sender's own cell is outlined.

All four grids of one result share the total's colour scale (`share_scale`): drawn side by side, a
head's direct and indirect cells compare by colour, and each cell against what the head moves in all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from bokeh.plotting import figure

from attnlab.errors import AttnlabError
from attnlab.record.paths import PathPatching
from attnlab.record.trace import KINDS
from attnlab.viz.options import check_options
from attnlab.viz.patching import patching_figure, share_scale
from attnlab.viz.words import kind_name, say

PARTS = ("total", "direct", "indirect", "receivers")


def path_patching_figure(
    paths: PathPatching,
    part: str = "direct",
    *,
    title: str | None = None,
    name: str | None = None,
    on_select: Callable[[str, int, int], None] | None = None,
    words: Mapping[str, str] | None = None,
) -> figure:
    """One `part` of `paths` ("total", "direct", "indirect", or "receivers": those of the sender it
    was traced with) as every head's share of the difference, on the total's colour scale. `title`
    None is the part's own; `name` None is "path-patching-{part}"; `on_select(kind, layer, head)` is
    called when a cell is tapped; `words` replaces any of `viz.words.WORDS` ("paths.*",
    "patching.*", "kind.*")."""
    if not isinstance(paths, PathPatching):
        raise AttnlabError(
            f"path_patching_figure draws what attnlab's path patching returns, got {type(paths).__name__}"
        )
    if part not in PARTS:
        raise AttnlabError(f"no part {part!r} of a path patching: choose from {', '.join(PARTS)}")
    if part == "receivers" and (paths.sender is None or paths.receivers is None):
        raise AttnlabError("no receivers to draw: trace the path patching with a sender=(kind, layer, head) first")
    check_options(title=title)
    said = say(words)
    shown = {"total": paths.total, "direct": paths.direct, "indirect": paths.indirect, "receivers": paths.receivers}
    own = said[f"paths.title_{part}"]
    if part == "receivers":
        kind, layer, head = paths.sender
        own = own.format(sender=said["stats.label"].format(kind=kind_name(kind, said), layer=layer, head=head))
        said["patching.not_patched"] = said["paths.not_receiver"]  # NaN here: a head the sender's change does not reach
    fig = patching_figure(
        shown[part],
        title=title or own,
        name=name or f"path-patching-{part}",
        on_select=on_select,
        words=said,
        scale=share_scale(paths.total.share),
    )
    if part == "receivers":
        _outline_sender(fig, paths, said["paths.sender"])
    return fig


def _outline_sender(fig: figure, paths: PathPatching, said: str) -> None:
    """Frame the sender's cell (it is no receiver of itself: grey, "–") and let its hover say so."""
    cells = fig.select_one({"name": "cells"}).data_source
    kind, layer, head = paths.sender
    at = int(np.ravel_multi_index((KINDS.index(kind), layer, head), paths.total.share.shape))
    tips = list(cells.data["share_tip"])
    tips[at] = said
    cells.data["share_tip"] = tips
    x, y = [cells.data["x"][at]], [cells.data["y"][at]]
    fig.rect(x=x, y=y, width=0.92, height=0.92, fill_alpha=0, line_color="#222222", line_width=3, name="sender")
