"""The figures' words in a screen's language. `attnlab.viz` may not import the screens, so it
draws in English unless a view is given `words`: templates for its titles, axis labels, hover
fields, legends and table headers, keyed as in `attnlab.viz.WORDS`. `figure_words(lang)` fills
every one of them from the catalogue (`attnlab.app.i18n`), and the explorer and the widgets pass
that one mapping to every view they draw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np

from attnlab.app.i18n import DEFAULT, checked, text
from attnlab.app.patching_text import word
from attnlab.record.importance import trace_importance
from attnlab.record.saliency import Saliency


@cache
def _words(lang: str) -> Mapping[str, str]:
    return MappingProxyType(
        {
            # the kinds of attention, in full and in short
            "kind.encoder": text("kind.encoder.title", lang),
            "kind.decoder": text("kind.decoder.title", lang),
            "kind.cross": text("kind.cross.title", lang),
            "kind_name.encoder": text("kind.encoder", lang),
            "kind_name.decoder": text("kind.decoder", lang),
            "kind_name.cross": text("kind.cross", lang),
            # one head, every head
            "head.title": text("figure.head_title", lang),
            "head.off": text("figure.head_off", lang),
            "head.normed": text("figure.head_normed", lang),
            "head.query": text("figure.query", lang),
            "head.key": text("figure.key", lang),
            "head.weight": text("figure.weight", lang),
            "head.masked": text("figure.masked", lang),
            "lines.hint": text("figure.lines_hint", lang),
            "lines.hint_every": text("figure.lines_hint_every", lang),
            "lines.every_head": text("figure.lines_every_head", lang),
            "lines.tool_heads": text("figure.lines_tool_heads", lang),
            "lines.tool_q": text("figure.lines_tool_q", lang),
            "lines.tool_k": text("figure.lines_tool_k", lang),
            "lines.pointed": text("figure.lines_pointed", lang),
            "lines.every_line": text("figure.lines_every_line", lang),
            "lines.head_hidden": text("figure.lines_head_hidden", lang),
            "lines.head_shown": text("figure.lines_head_shown", lang),
            "tool.pan": text("figure.tool_pan", lang),
            "tool.xpan": text("figure.tool_xpan", lang),
            "tool.wheel_zoom": text("figure.tool_wheel_zoom", lang),
            "tool.box_zoom": text("figure.tool_box_zoom", lang),
            "tool.reset": text("figure.tool_reset", lang),
            "tool.save": text("figure.tool_save", lang),
            "tool.hover": text("figure.tool_hover", lang),
            "tool.tap": text("figure.tool_tap", lang),
            "tool.box_select": text("figure.tool_box_select", lang),
            "grid.title": text("figure.grid_title", lang),
            "grid.layer": text("figure.grid_layer", lang),
            "grid.head": text("figure.grid_head", lang),
            "grid.cell": text("figure.grid_cell", lang),
            "grid.drag": text("figure.grid_drag", lang),
            "grid.mean": text("figure.grid_mean", lang),
            # head statistics
            "stats.kind": text("selection.kind", lang),
            "stats.layer": text("selection.layer", lang),
            "stats.head": text("selection.head", lang),
            "stats.entropy": text("figure.entropy", lang),
            "stats.distance": text("figure.distance", lang),
            "stats.self": text("figure.self", lang),
            "stats.prev": text("figure.prev", lang),
            "stats.next": text("figure.next", lang),
            "stats.first": text("figure.first", lang),
            "stats.eos": text("figure.eos", lang),
            "stats.max": text("figure.max", lang),
            "stats.diagonal": text("figure.diagonal", lang),
            "stats.aer": text("figure.aer", lang),
            "stats.precision": text("figure.precision", lang),
            "stats.recall": text("figure.recall", lang),
            "stats.importance": text("figure.importance", lang),
            "stats.direct": text("figure.direct", lang),
            "stats.pattern": text("figure.pattern", lang),
            "stats.pattern.prev": text("figure.pattern_prev", lang),
            "stats.pattern.self": text("figure.pattern_self", lang),
            "stats.pattern.next": text("figure.pattern_next", lang),
            "stats.pattern.diagonal": text("figure.diagonal", lang),
            "stats.pattern.first": text("figure.pattern_first", lang),
            "stats.pattern.eos": text("figure.pattern_eos", lang),
            "stats.pattern.peaked": text("figure.pattern_peaked", lang),
            "stats.pattern.broad": text("figure.pattern_broad", lang),
            "stats.pattern.mixed": text("figure.pattern_mixed", lang),
            "stats.label": text("head.short", lang),
            "stats.title": text("figure.stats_title", lang),
            # training, ablation
            "timeline.diff_title": text("figure.diff_title", lang),
            "timeline.diff_value": text("figure.diff_value", lang),
            "timeline.title": text("figure.timeline_title", lang),
            "timeline.step": text("timeline.step", lang),
            "ablation.title": text("figure.ablation_title", lang),
            "ablation.token": text("figure.token", lang),
            "ablation.before": text("widgets.all_heads", lang),
            "ablation.after": text("widgets.heads_off", lang),
            # masks and Eq. (1)
            "mask.title": text("figure.mask_title", lang),
            "mask.padding": text("figure.mask_padding", lang),
            "mask.causal": text("figure.mask_causal", lang),
            "mask.padded": text("figure.mask_padded", lang),
            "mask.allowed": text("figure.allowed", lang),
            "eq1.scores": text("figure.scores", lang),
            "eq1.masked": text("figure.masked_scores", lang),
            "eq1.softmax": text("figure.softmax", lang),
            "eq1.values": text("figure.values", lang),
            "eq1.key": text("figure.key_j", lang),
            "eq1.dimension": text("figure.dimension", lang),
            "eq1.value": text("figure.value", lang),
            "eq1.output": text("output.output", lang),
            "dot.title": text("figure.dot_title", lang),
            "dot.products": text("figure.dot_products", lang),
            "dot.dimension": text("figure.dot_dimension", lang),
            # attention rollout
            "rollout.title": text("figure.rollout_title", lang),
            "rollout.share": text("figure.rollout_share", lang),
            "rollout.input": text("figure.rollout_input", lang),
            # the logit lens
            "lens.title": text("figure.lens_title", lang),
            "lens.layer": text("figure.lens_layer", lang),
            "lens.input": text("figure.lens_input", lang),
            "lens.output": text("figure.lens_output", lang),
            "lens.drag": text("figure.lens_drag", lang),
            "lens.p": text("figure.lens_p", lang),
            "lens.rank": text("figure.lens_rank", lang),
            "lens.top": text("figure.lens_top", lang),
            # direct logit attribution
            "attribution.title_mean": text("figure.attribution_title_mean", lang),
            "attribution.title_runner_up": text("figure.attribution_title_runner_up", lang),
            "attribution.title_other": text("figure.attribution_title_other", lang),
            "attribution.layer": text("figure.lens_layer", lang),
            "attribution.head": text("figure.importance_head", lang),
            "attribution.self": text("figure.attribution_self", lang),
            "attribution.cross": text("figure.attribution_cross", lang),
            "attribution.ffn": text("figure.attribution_ffn", lang),
            "attribution.ffn_part": text("figure.attribution_ffn_part", lang),
            "attribution.share": text("figure.attribution_share", lang),
            "attribution.reads": text("figure.attribution_reads", lang),
            "attribution.source_title": text("figure.attribution_source_title", lang),
            "attribution.source": text("figure.residual_source", lang),
            # gradient saliency
            "saliency.title": text("figure.saliency_title", lang),
            "saliency.title_smooth": text("figure.saliency_title_smooth", lang),
            "saliency.output": text("figure.saliency_output", lang),
            "saliency.input": text("figure.saliency_input", lang),
            "saliency.source": text("figure.saliency_source", lang),
            "saliency.inputs": text("figure.saliency_inputs", lang),
            "saliency.share": text("figure.saliency_share", lang),
            "saliency.score": text("figure.saliency_score", lang),
            "saliency.masked": text("figure.saliency_masked", lang),
            # head importance
            "importance.title_gradient": text("figure.importance_title_gradient", lang),
            "importance.title_ablation": text("figure.importance_title_ablation", lang),
            "importance.layer": text("figure.importance_layer", lang),
            "importance.head": text("figure.importance_head", lang),
            "importance.gradient": text("figure.importance_gradient", lang),
            "importance.ablation": text("figure.importance_ablation", lang),
            # head patching
            "patching.title_denoise": text("figure.patching_title_denoise", lang),
            "patching.title_noise": text("figure.patching_title_noise", lang),
            "patching.layer": text("figure.importance_layer", lang),
            "patching.head": text("figure.importance_head", lang),
            "patching.share": text("figure.patching_share", lang),
            "patching.nats": text("figure.patching_nats", lang),
            "patching.not_patched": text("figure.patching_not_patched", lang),
            "patching.estimated": text("figure.patching_estimated", lang),
            # path patching
            "paths.title_total": text("figure.paths_title_total", lang),
            "paths.title_direct": text("figure.paths_title_direct", lang),
            "paths.title_indirect": text("figure.paths_title_indirect", lang),
            "paths.title_receivers": text("figure.paths_title_receivers", lang),
            "paths.not_receiver": text("figure.paths_not_receiver", lang),
            "paths.sender": text("figure.paths_sender", lang),
            # a circuit
            "circuit.title": text("figure.circuit_title", lang),
            "circuit.encoder": text("kind.encoder", lang),
            "circuit.decoder": text("kind.decoder", lang),
            "circuit.ffn": text("figure.circuit_ffn", lang),
            "circuit.empty": text("figure.circuit_empty", lang),
            "circuit.path_tip": text("figure.circuit_path_tip", lang),
            "circuit.row_encoder": text("figure.circuit_row_encoder", lang),
            "circuit.row_decoder": text("figure.circuit_row_decoder", lang),
            "circuit.row_cross": text("figure.circuit_row_cross", lang),
            "circuit.row_ffn": text("figure.circuit_ffn", lang),
            "circuit.output": text("figure.circuit_output", lang),
            "circuit.path": text("figure.circuit_path", lang),
            "circuit.part": text("figure.circuit_part", lang),
            "circuit.node": text("figure.circuit_node", lang),
            # residual-stream patching
            "residual.title_denoise": text("figure.residual_title_denoise", lang),
            "residual.title_noise": text("figure.residual_title_noise", lang),
            "residual.encoder": text("kind.encoder", lang),
            "residual.decoder": text("kind.decoder", lang),
            "residual.stream": text("figure.residual_stream", lang),
            "residual.embeddings": text("figure.residual_embeddings", lang),
            "residual.layer": text("figure.grid_layer", lang),
            "residual.source": text("figure.residual_source", lang),
            "residual.output": text("figure.lens_output", lang),
            "residual.drag": text("figure.lens_drag", lang),
            "residual.share": text("figure.patching_share", lang),
            "residual.not_patched": text("figure.patching_not_patched", lang),
            # a parse, the export, two models
            "tree.title": text("figure.tree", lang),
            "tree.drag": text("figure.tree_drag", lang),
            "export.input": text("widgets.input", lang),
            "export.output": text("widgets.output", lang),
            "export.model": text("figure.model", lang),
            "export.weights": text("figure.weights", lang),
            "compare.title": text("compare.map_title", lang),
            "compare.diff_title": text("compare.diff_title", lang),
            "compare.missing": text("compare.missing", lang),
            "compare.rollout_title": text("compare.rollout_title", lang),
            "compare.rollout_diff": text("compare.rollout_diff", lang),
            "compare.rollout_missing": text("compare.rollout_missing", lang),
            "compare.sizes": text("compare.sizes", lang),
            "compare.pieces": text("compare.pieces", lang),
        }
    )


def figure_words(lang: str = DEFAULT) -> Mapping[str, str]:
    """Every template of `attnlab.viz.WORDS` in `lang`, read-only and made once per language: the
    `words=` of every `attnlab.viz` view a screen draws. A language we do not have is refused, as
    the widgets' `lang=` is ("ES" in a notebook gave English figures without a word)."""
    return _words(checked(lang))


def compared_lens_title(name: str, first: str, lang: str) -> str:
    """The title of model `name`'s logit lens beside model `first`'s: the second model is read on
    the first's output, so its red cells are where a layer's choice is not the first's word, not
    where it is not yet its own final choice (its title said so, and its top row came out red)."""
    if name == first:
        return text("compare.lens_title", lang, name=name)
    return text("compare.lens_title_second", lang, name=name, first=first)


def saliency_line(s: Saliency, lang: str) -> str:
    """The line under a saliency map: the output piece whose |gradient × input| comes least from
    the source (`Saliency.source_share`), where the map's left block is palest: a piece the model
    wrote from the words before it (a German article's ending, the final "."), not by translating.
    A row of no saliency at all (a probability flat to the last digit) has no source share to name:
    "0% on the source and the rest on the output" said what it did not have; none such: no line."""
    shares = s.source_share()
    total = np.abs(s.source_scores).sum(1) + np.abs(s.target_scores).sum(1)
    read = np.flatnonzero(total > 0)
    if not len(read):
        return ""
    least = int(read[shares[read].argmin()])
    percent = round(100 * float(shares[least]))
    return text("saliency.least", lang, piece=word(s.produced, least), position=least, percent=percent)


class WeighedAlike:
    """Both compared models' head importance (`trace_importance` of each (model, trace) side that
    `sides` gives), weighed once, on the first grid drawn, and the top of the one colour scale
    both grids share (each on its own scale, the same blue read 0.39 in one and 1.27 in the other).
    The explorer's Compare tab and `compare_models` draw with it."""

    def __init__(self, sides: Callable[[], Sequence[tuple[Any, Any]]]) -> None:
        self._sides, self._found = sides, None

    def __call__(self, side: int) -> tuple[Any, float]:
        """(side `side`'s importance, the shared top of the scale)."""
        if self._found is None:
            weighed = [trace_importance(model, trace) for model, trace in self._sides()]
            self._found = weighed, max(max(float(abs(w.gradient).max()) for w in weighed), 1e-9)
        weighed, high = self._found
        return weighed[side], high
