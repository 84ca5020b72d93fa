"""The words the figures write -- titles, axis labels, hover fields, legends, table headers -- in
English, as `str.format` templates keyed by view ("head.*", "grid.*", ...).

Every view takes `words=`, a mapping that replaces any of these templates (the screens pass their
catalogue's, in the page's language: `attnlab.app.words`); what it does not replace stays English,
so the library draws as before without it. The paper's notation (QKᵀ/√d_k, aⱼ·vⱼ, −∞, Σ) and the
tokens themselves are never words: they are drawn as they are in every language.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from attnlab.data.tokenizer import check_unicode
from attnlab.errors import AttnlabError

# fmt: off
WORDS: dict[str, str] = {
    # the kinds of attention: in full (titles) and short (legends, table cells)
    "kind.encoder": "encoder self-attention",
    "kind.decoder": "decoder self-attention (masked)",
    "kind.cross": "encoder–decoder attention",
    "kind_name.encoder": "encoder",
    "kind_name.decoder": "decoder",
    "kind_name.cross": "cross",
    # one head (head.py): its title, the hover's fields and axes, the colour bar
    "head.title": "{kind_title} · layer {layer} · head {head}",
    "head.off": "switched off (its output zeroed)",  # after " · " in the title of a head ablated when recorded
    "head.normed": "weighed by ‖αf(x)‖",  # after " · " in the title of a trace weighed by `record.norms.norm_trace`
    "head.query": "query",
    "head.key": "key",
    "head.weight": "weight",
    "head.masked": "masked (score −∞, weight 0)",
    # one head as lines (lines.py), under its "head.title"
    "lines.every_head": "{kind_title} · layer {layer} · every head, each in its colour",
    "lines.hint": "a line from each query to each key it reads, as dark as the weight; point at a word (↑ ↓ ← →) for its lines alone",
    "lines.hint_every": (
        "each head in its colour, as dark as the weight; point at a word (↑ ↓ ← →) for its lines alone,"
        " click a head's name (or its number) to hide or show it"
    ),
    # read out as the keys point (lines.py): a word, every line again, a head hidden or shown
    "lines.pointed": "{side} {n} of {count}: {word}",
    "lines.every_line": "every line",
    "lines.head_hidden": "{head} hidden",
    "lines.head_shown": "{head} shown",
    "lines.tool_heads": "hide or show a head's lines (click its name)",  # the toolbar's tips (they read "lines-heads")
    "lines.tool_q": "a query's lines alone (point at it)",  # (one per column: bokeh shows both on one button)
    "lines.tool_k": "a key's lines alone (point at it)",
    # every figure's toolbar tips (`words.name_tools`; bokeh's own are English)
    "tool.pan": "Pan",
    "tool.xpan": "Pan sideways",
    "tool.wheel_zoom": "Zoom with the wheel",
    "tool.box_zoom": "Zoom to a box",
    "tool.reset": "Reset the view",
    "tool.save": "Save as PNG",
    "tool.hover": "Details on hover",
    "tool.tap": "Click to pick",
    "tool.box_select": "Select with a box",
    # every head (overview.py)
    "grid.title": "{kind_title}: layers × heads (click one to open it)",
    "grid.layer": "layer {layer}",
    "grid.head": "head {head}",
    "grid.cell": "layer {layer} · head {head}",
    "grid.drag": "{axis}: drag sideways for the rest",
    "grid.mean": "mean over the sentences",  # a corpus profile's colour bar (`profile_grid`)  # a grid of blocks (cells.py) a narrow window cuts
    # head statistics (stats.py): the table's headers, the scatter's title and hover
    "stats.kind": "kind",
    "stats.layer": "layer",
    "stats.head": "head",
    "stats.entropy": "entropy",
    "stats.distance": "distance",
    "stats.self": "self",
    "stats.prev": "prev",
    "stats.next": "next",
    "stats.first": "first",
    "stats.eos": "eos",
    "stats.max": "max",
    "stats.diagonal": "diagonal",  # this and the alignment scores below: a corpus profile's columns
    "stats.aer": "AER",
    "stats.precision": "precision",
    "stats.recall": "recall",
    "stats.importance": "importance",  # |∂ log P / ∂ gate| (Michel et al. 2019), a profile's column if asked for
    "stats.direct": "direct share of the logits",  # a decoder head's direct logit attribution, a profile's column if asked for
    "stats.pattern": "pattern",  # what the head does (`record.stats.head_pattern`), then each pattern's name
    "stats.pattern.prev": "previous piece",
    "stats.pattern.self": "own position",
    "stats.pattern.next": "next piece",
    "stats.pattern.diagonal": "diagonal",
    "stats.pattern.first": "first piece",
    "stats.pattern.eos": "end </s>",
    "stats.pattern.peaked": "peaked",
    "stats.pattern.broad": "broad",
    "stats.pattern.mixed": "mixed",
    "stats.label": "{kind} L{layer} H{head}",
    "stats.title": "heads: {x} vs {y}",
    # training dynamics (timeline.py)
    "timeline.diff_title": "difference to the final model · {kind} · layer {layer} · head {head}",
    "timeline.diff_value": "Δ weight",
    "timeline.title": "{stat} of each head across training",
    "timeline.step": "training step",
    # head ablation (ablation.py)
    "ablation.title": "log-probability of each original output token",
    "ablation.token": "token",
    "ablation.before": "all heads",
    "ablation.after": "heads off",
    # masks and Eq. (1) (equation.py)
    "mask.title": "{kind}: {what}",
    "mask.padding": "padding mask (one sentence: nothing padded)",
    "mask.causal": "causal mask (i sees keys ≤ i)",
    "mask.padded": "padding mask: padded keys forbidden",
    "mask.allowed": "allowed",
    "eq1.scores": "{title} · query {query} ({label}): scores q·kⱼ/√d_k",
    "eq1.masked": "masked scores: forbidden keys set to −∞",
    "eq1.softmax": "softmax: attention weights (sum 1)",
    "eq1.values": "weighted values aⱼ·vⱼ (columns), summed over keys →",
    "eq1.key": "key j",
    "eq1.dimension": "dimension of v",
    "eq1.value": "value",
    "eq1.output": "output",
    # one score taken apart (`dot_product_figure`)
    "dot.title": "{title} · query {i} ({q}) · key {j} ({k}): the score, dimension by dimension",
    "dot.products": "q_d·k_d/√d_k for each dimension d: they sum to the score, {score:.3f}",
    "dot.dimension": "dimension d",
    # attention rollout (rollout.py): the flow from the input tokens up to a layer
    "rollout.title": "attention rollout · {kind_title} · up to layer {layer}",
    "rollout.share": "share",
    "rollout.input": "input token",
    # the logit lens (lens.py): what each decoder layer would output
    "lens.title": "logit lens: what each decoder layer would output (red: not yet the final choice)",
    "lens.layer": "decoder layer",
    "lens.input": "decoder input",
    "lens.output": "output",
    "lens.drag": "{output}: drag sideways to see all {n} positions",
    "lens.p": "P(output)",
    "lens.rank": "rank of the output",
    "lens.top": "likeliest",
    # direct logit attribution (logit_attribution.py): each decoder part's share of one output piece's logit
    "attribution.title_mean": "“{piece}” (position {position}): logit − mean logit = {logit:.1f}; each decoder part's direct share",
    "attribution.title_runner_up": "“{piece}” (position {position}): logit − the runner-up “{other}”'s = {logit:.1f}; each decoder part's direct share",
    "attribution.title_other": "“{piece}” (position {position}): logit − the logit of “{other}” = {logit:.1f}; each decoder part's direct share",
    "attribution.layer": "decoder layer",
    "attribution.head": "head",
    "attribution.self": "self-attention heads",  # the three blocks of columns
    "attribution.cross": "cross-attention heads",
    "attribution.ffn": "FFN",
    "attribution.ffn_part": "feed-forward layer {layer}",  # in the hover
    "attribution.share": "share of the logit",
    "attribution.reads": "source pieces it read most",
    "attribution.source_title": "what the encoder–decoder heads read directly from each source piece for “{piece}” (in all {total:+.1f})",
    "attribution.source": "source",
    # gradient saliency (saliency.py): each input piece's share of each output piece's |gradient × input|
    "saliency.title": "gradient × input: which input pieces each output piece depends on (each row sums to 1)",
    "saliency.title_smooth": "SmoothGrad (gradient × input averaged over {samples} noisy copies): which input pieces each output piece depends on (each row sums to 1)",
    "saliency.output": "output piece",
    "saliency.input": "input piece",
    "saliency.source": "source",  # the two groups of columns
    "saliency.inputs": "output so far",
    "saliency.share": "share of the row",
    "saliency.score": "gradient × input",  # the signed score, in the hover
    "saliency.masked": "not seen: a later piece (causal mask)",
    # head importance (importance.py): how much the output depends on each head
    "importance.title_gradient": "how much the output depends on each head: |∂ log P(output) / ∂ gate| (Michel et al., 2019)",
    "importance.title_ablation": "log-probability of the output lost with each head alone switched off",
    "importance.layer": "layer",
    "importance.head": "head",
    "importance.gradient": "|∂ log P / ∂ gate|",
    "importance.ablation": "log P lost without it",
    # head patching (patching.py): the share of the clean/corrupted difference each head alone moves
    "patching.title_denoise": "share of the difference each head alone restores when the corrupted run takes its clean output",
    "patching.title_noise": "share of the difference each head alone causes when the clean run takes its corrupted output",
    "patching.layer": "layer",
    "patching.head": "head",
    "patching.share": "share of the difference",
    "patching.nats": "log P moved (nats)",
    "patching.not_patched": "not patched: the two sources have a different number of pieces, so encoder positions do not line up",
    "patching.estimated": "estimated from one gradient (attribution patching), not measured: {title}",  # both patching views
    # path patching (paths.py): each head's share split by path, on head patching's grids and scale
    "paths.title_total": "total: share of the difference each head alone moves, by every path (activation patching)",
    "paths.title_direct": "direct: share of the difference each head moves straight to the output, every other head and feed-forward layer frozen",
    "paths.title_indirect": "indirect: share of the difference each head moves through later heads and feed-forward layers (total − direct)",
    "paths.title_receivers": "share of the difference {sender} moves through each later head (and on from it by any path)",
    "paths.not_receiver": "not a receiver: this head does not read what the sender writes",
    "paths.sender": "the sender: its effect splits over the heads that read it",
    # a circuit (circuit.py): the paths that carry a change, drawn on the encoder and decoder towers
    "circuit.title": "the paths that carry the change, each as wide as its share (≥ {threshold:.2f})",
    "circuit.encoder": "encoder",
    "circuit.decoder": "decoder",
    "circuit.ffn": "FFN",  # a feed-forward layer, short: a node's label and name
    "circuit.row_encoder": "self-attn",  # the rows of a tower, each followed by " L{layer}"
    "circuit.row_decoder": "masked self-attn",
    "circuit.row_cross": "enc-dec attn",
    "circuit.row_ffn": "FFN",
    "circuit.output": "output",
    "circuit.empty": "no path carries {threshold:.2f} of the change or more: lower the smallest path",
    "circuit.path_tip": "{start} → {end}: {share:+.3f}",  # a curve's hover
    "circuit.path": "path",  # a curve's hover: "cross L1 H1 → decoder FFN L1: +0.290"
    "circuit.part": "part",  # a node's hover
    "circuit.node": "{name}: total {total:+.3f}, direct {direct:+.3f}",
    # residual-stream patching (residual.py): the share each layer's output at one position alone moves
    "residual.title_denoise": "{side}: share of the difference each layer's output at one position restores alone, taken from the clean run",
    "residual.title_noise": "{side}: share of the difference each layer's output at one position causes alone, taken from the corrupted run",
    "residual.encoder": "encoder",
    "residual.decoder": "decoder",
    "residual.stream": "residual stream",  # the rows' axis: the embeddings, then each layer's output
    "residual.embeddings": "embeddings",
    "residual.layer": "layer {layer}",
    "residual.source": "source",  # the encoder's columns (changed pieces: "▁man→▁woman")
    "residual.output": "output",  # the decoder's columns
    "residual.drag": "{output}: drag sideways to see all {n} positions",
    "residual.share": "share of the difference",
    "residual.not_patched": "not patched: the two sources have a different number of pieces, so encoder positions do not line up",
    # a parse (tree.py), the export (export.py)
    "tree.title": "parse tree",
    "tree.drag": "{title}: drag sideways to see all {n} words",
    "export.input": "input",
    "export.output": "output",
    "export.model": "model",
    "export.weights": "weights {sha}",
    # two models side by side (compare.py); fields {name}, {first}, {second}, {layers}, {heads}
    "compare.title": "{name} · {kind_title} · layer {layer} · head {head}",
    "compare.diff_title": "{first} − {second} · layer {layer} · head {head}",
    "compare.missing": "{name} has no {kind} layer {layer} head {head} (N = {layers}, h = {heads})",  # Table 3's names
    "compare.rollout_title": "{name} · attention rollout · {kind_title} · up to layer {layer}",
    "compare.rollout_diff": "{first} − {second} · attention rollout up to layer {layer}",
    "compare.rollout_missing": "{name} has no {kind} layer {layer} (N = {layers})",
    "compare.sizes": "no difference map: the two models differ in size here",
    "compare.pieces": "no difference map: the models read or wrote different pieces",
}
# fmt: on


HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")  # a Chinese character (not its punctuation: "（" needs no space)
LATIN = re.compile("[0-9A-Za-z\u00c0-\u024f]")  # a Latin letter (ü, é too) or a digit
FIELD = re.compile(r"(\{\{|\}\})|(\{[^{}]*\})")  # an escaped brace, or a field
JOINT = re.compile(r"(?<=(.))[ \x00]*\x00[ \x00]*(?=(.))")  # a filled field's edge (\x00), the spaces at it


class Spaced(str):
    """A template written in Chinese, whose `format` sets the spaces at each filled field's edges
    as Chinese is set: none between two Chinese words, one between Chinese and a Latin letter or
    digit. A template cannot know what its fields will hold ("平均 {stat}": 平均熵 but 平均 AER;
    "读取{first}的输出": 读取 A 的输出; "{x} 与 {y}": 熵与距离); any other edge (punctuation,
    markup, Latin on both sides) and every space away from a field stay as written ("第 {layer} 层")."""

    def format(self, *args: object, **kwargs: object) -> str:
        marked = FIELD.sub(lambda m: m[1] or f"\x00{m[2]}\x00", self)  # each field's edges marked
        return JOINT.sub(_joint, marked.format(*args, **kwargs)).replace("\x00", "")


def _joint(edge: re.Match[str]) -> str:
    """The spaces at a filled field's edge, from the characters either side (see `Spaced`)."""
    han, latin = ([bool(kind.match(c)) for c in edge.groups()] for kind in (HAN, LATIN))
    if all(han):
        return ""
    return " " if (han[0] and latin[1]) or (latin[0] and han[1]) else edge[0]


def say(words: Mapping[str, str] | None = None) -> dict[str, str]:
    """The templates a view writes with: English, with `words`' replacements, those in Chinese
    made `Spaced`. `words` that are not a mapping of strings are one line (a TypeError, or an
    AttributeError in a title), and so is a word with a lone surrogate (`check_unicode`)."""
    if words is None:
        return dict(WORDS)
    if not isinstance(words, Mapping):
        raise AttnlabError(f"words must map template names (viz.WORDS) to strings, got {type(words).__name__}")
    for key, value in words.items():
        if not isinstance(value, str):
            raise AttnlabError(f"words[{key!r}] must be a string (a template), got {type(value).__name__}")
        check_unicode(value, f"words[{key!r}]")
    return {**WORDS, **{key: Spaced(value) if HAN.search(value) else value for key, value in words.items()}}


def kind_title(kind: str, words: Mapping[str, str]) -> str:
    """A kind of attention in full ("encoder–decoder attention"), as `words` (from `say`) write it."""
    return words.get(f"kind.{kind}", kind)


def kind_name(kind: str, words: Mapping[str, str]) -> str:
    """A kind of attention in short ("cross"), as `words` (from `say`) write it."""
    return words.get(f"kind_name.{kind}", kind)


def stat_name(column: str, words: Mapping[str, str]) -> str:
    """A head statistic's column ("eos") as `words` write it; a column with no words (one a newer
    `attnlab.record.stats` added) by its own name."""
    return words.get(f"stats.{column}", column)


# bokeh's tools by the word that names them in `WORDS` ("tool.*"); a pan along x alone is "xpan"
TOOL_WORDS = {
    "PanTool": "tool.pan",
    "WheelZoomTool": "tool.wheel_zoom",
    "BoxZoomTool": "tool.box_zoom",
    "ResetTool": "tool.reset",
    "SaveTool": "tool.save",
    "HoverTool": "tool.hover",
    "TapTool": "tool.tap",
    "BoxSelectTool": "tool.box_select",
}


def name_tools(root: Any, said: Mapping[str, str]) -> None:
    """Give every toolbar tool in `root` that has no tip of its own the tip `said` names it by:
    bokeh's own ("Pan", "Wheel Zoom", "Hover") are English on a Spanish or Chinese page."""
    for model in root.references():
        key = TOOL_WORDS.get(type(model).__name__)
        if key is not None and getattr(model, "description", "") is None:
            model.description = said["tool.xpan" if getattr(model, "dimensions", "") == "width" else key]
