"""attnlab.viz — plots of attention: functions that take an `AttentionTrace` (and options) and
return bokeh figures, one module per view, plus export (PNG, SVG, standalone HTML) that needs no
browser and no network.

May import: `attnlab.record` (traces), `attnlab.data` (parse trees for the tree view) and
`attnlab.errors`; never a model, a decoder, a training loop or a screen. Views read traces,
they compute nothing: a number a view shows is in the trace or comes from `attnlab.record`.
The explorer (`attnlab.app.explorer`) and the notebook widgets (`attnlab.app.widgets`) are thin
layers over these functions; nothing here imports Panel or ipywidgets.

Conventions: rows are queries (top to bottom), columns are keys (left to right), weights are
drawn on a fixed 0..1 scale unless `vmax=None` (scale to the map's maximum). Heads and layers
are named by their ids in the model, not by a map's row (`selection.py`: a trace may hold a
subset of them), and a negative layer is titled with the model's index. Cells a mask forbade
(the causal mask, padding) are hatched grey, never confused with a real zero, which is white.
Long inputs stay cheap: a heatmap is one `image` glyph, the grid one figure of RGBA thumbnails,
and axis labels are thinned to what fits. Every view that takes `title=` (a string; None: its own)
or `budget=` (pixels, a whole number > 0) checks them one way (`options.check_options`).

Text in any script: every view writes in `FONT_STACK` (Latin and accented, CJK, Hebrew, Arabic;
`fonts.use_fonts` sets it on a layout), a piece longer than 14 columns (a CJK character is two)
is cut with "…" and shown whole on hover, and a right-to-left piece is isolated (FSI … PDI) so
that it cannot reorder the text around it (`labels.piece_label`).

Words in any language: every view writes its titles, axis labels, hover fields, legends and table
headers from `WORDS` (`words.py`, English `str.format` templates); each takes `words=`, a mapping
that replaces any of them, which the screens fill from their catalogue in the page's language.
"""

from attnlab.viz.ablation import token_delta_figure
from attnlab.viz.cells import one_width
from attnlab.viz.circuit import circuit_figure
from attnlab.viz.colors import (
    DIFF_PALETTE,
    KIND_COLORS,
    KIND_TITLES,
    MASK_DARK,
    MASK_LIGHT,
    PALETTE,
    colorize,
    downsample,
    hatch,
)
from attnlab.viz.compare import compare_figures, compare_rollouts, has_head, two_names, word_diff
from attnlab.viz.equation import computation_figure, dot_product_figure, mask_figure
from attnlab.viz.export import heatmap_png, heatmap_svg, standalone_html, summary_div
from attnlab.viz.fonts import FONT_STACK, use_fonts
from attnlab.viz.head import heatmap, matrix_figure, update_heatmap, update_matrix
from attnlab.viz.importance import importance_figure, importance_pick
from attnlab.viz.labels import display_width, piece_label, piece_word, spelled
from attnlab.viz.lens import lens_figure, lens_pick, lens_table
from attnlab.viz.lines import lines_figure, update_lines
from attnlab.viz.logit_attribution import (
    attribution_scale,
    attribution_title,
    logit_attribution_figure,
    logit_source_figure,
)
from attnlab.viz.overview import GRID_SIDE, grid, grid_pick, update_grid
from attnlab.viz.patching import patching_figure
from attnlab.viz.paths import path_patching_figure
from attnlab.viz.profile import profile_grid, profile_pick, shared_limits
from attnlab.viz.residual import residual_patching_figure
from attnlab.viz.rollout import rollout_figure, rollout_table
from attnlab.viz.saliency import saliency_figure, saliency_scale
from attnlab.viz.selection import head_ids, head_map, pick, selection
from attnlab.viz.stats import STAT_COLUMNS, stats_scatter, stats_source, stats_table
from attnlab.viz.table import weights_table
from attnlab.viz.timeline import diff_figure, timeline_curve
from attnlab.viz.tree import tree_figure
from attnlab.viz.words import WORDS, stat_name

__all__ = [
    "DIFF_PALETTE",
    "FONT_STACK",
    "GRID_SIDE",
    "KIND_COLORS",
    "KIND_TITLES",
    "MASK_DARK",
    "MASK_LIGHT",
    "PALETTE",
    "STAT_COLUMNS",
    "WORDS",
    "attribution_scale",
    "attribution_title",
    "colorize",
    "compare_figures",
    "compare_rollouts",
    "computation_figure",
    "diff_figure",
    "display_width",
    "dot_product_figure",
    "downsample",
    "grid",
    "grid_pick",
    "has_head",
    "hatch",
    "head_ids",
    "head_map",
    "heatmap",
    "heatmap_png",
    "heatmap_svg",
    "importance_figure",
    "importance_pick",
    "lens_figure",
    "lens_table",
    "lens_pick",
    "lines_figure",
    "logit_attribution_figure",
    "logit_source_figure",
    "mask_figure",
    "matrix_figure",
    "one_width",
    "circuit_figure",
    "path_patching_figure",
    "patching_figure",
    "pick",
    "piece_label",
    "piece_word",
    "profile_grid",
    "profile_pick",
    "residual_patching_figure",
    "rollout_figure",
    "rollout_table",
    "saliency_figure",
    "saliency_scale",
    "selection",
    "shared_limits",
    "spelled",
    "standalone_html",
    "stat_name",
    "stats_scatter",
    "stats_source",
    "stats_table",
    "summary_div",
    "timeline_curve",
    "token_delta_figure",
    "tree_figure",
    "two_names",
    "update_grid",
    "update_heatmap",
    "weights_table",
    "update_lines",
    "update_matrix",
    "use_fonts",
    "word_diff",
]
