"""Recording attention: one context manager over the model's named hook points.

    with record(model) as rec:
        model(src, tgt)
    traces = rec.traces(src, tgt, src_tokens, tgt_tokens)

Inside the block the selected `MultiHeadAttention` modules run the explicit Eq. (1) and hand
their weights here; outside it their `hook` is None again (also after an exception) and they
run the fused kernel. The hooks hold for the thread (or asyncio task) that opened the block
only, so other callers of a shared model are neither recorded nor slowed. Weights are detached
and kept on the CPU in float32.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attnlab.errors import AttnlabError, RecordingError
from attnlab.model.hooks import HOOKS, attached
from attnlab.model.transformer import MultiHeadAttention, Transformer
from attnlab.record.trace import KINDS, AttentionTrace, check_flag

_NAME = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(self_attn|cross_attn)$")


def hook_point(module: MultiHeadAttention) -> tuple[str, int]:
    """(kind, layer) of a hook point from its dotted name."""
    match = _NAME.match(module.name)
    if match is None:
        raise AttnlabError(f"{module.name!r} is not an attnlab hook point")
    return module.kind, int(match.group(2))


@dataclass
class _Capture:
    """Everything one hook point saw, one entry per call (one call per decoding step)."""

    weights: list[Tensor] = field(default_factory=list)  # (B, h, Lq, Lk) each
    masks: list[Tensor | None] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)


class Recording:
    """Collects weights from the hook points; turns them into per-sentence `AttentionTrace`s."""

    def __init__(self, n_layers: int, heads: Sequence[int] | None, keep_values: bool) -> None:
        self.n_layers = n_layers
        self.heads = None if heads is None else list(heads)
        self.keep_values = keep_values
        self.captures: dict[tuple[str, int], _Capture] = {}
        self.off: dict[tuple[str, int], list[int]] = {}  # heads switched off (`attnlab.ablate`) while recorded

    def hook(self, module: MultiHeadAttention, weights: Tensor, mask: Tensor | None, values: Tensor) -> None:
        point = hook_point(module)
        capture = self.captures.setdefault(point, _Capture())
        head_mask = module.head_mask  # an ablated head still attends; only its output is zeroed
        if head_mask is not None:
            off = [h for h in head_mask.eq(0).nonzero().flatten().tolist() if self.heads is None or h in self.heads]
            if off:
                self.off[point] = off
        if self.heads is not None:
            weights = weights[:, self.heads]
        capture.weights.append(weights.detach().float().cpu())
        capture.masks.append(None if mask is None else mask.detach().cpu())
        if self.keep_values:
            capture.values.append(values.detach().float().cpu())

    def weights(self, kind: str, layer: int) -> Tensor:
        """(B, h, Lq, Lk) for one hook point; incremental calls are stacked along Lq (keys
        that did not exist yet at an earlier step are exactly zero, as the causal mask says), and
        calls that cannot be one pass are refused (`_one_pass`)."""
        parts = self._one_pass(kind, layer).weights
        width = max(part.size(-1) for part in parts)
        padded = [torch.nn.functional.pad(part, (0, width - part.size(-1))) for part in parts]
        return torch.cat(padded, dim=2)

    def values(self, kind: str, layer: int) -> list[Tensor]:
        """(B, h, Lk, d_v) per call of one hook point (empty unless `keep_values`)."""
        return self._capture(kind, layer).values

    def _capture(self, kind: str, layer: int) -> _Capture:
        """What `kind` at model layer `layer` (negative: from the top) saw; a layer outside the
        model (`% n_layers` read layer 3 of 3 as layer 0) or not recorded is a one-line error."""
        if kind not in KINDS:
            raise AttnlabError(f"kind must be one of {KINDS}, got {kind!r}")
        layer = index_in(layer, self.n_layers, "layer")
        if (kind, layer) not in self.captures:
            raise AttnlabError(f"nothing was recorded for {kind} layer {layer}")
        return self.captures[(kind, layer)]

    def _one_pass(self, kind: str, layer: int) -> _Capture:
        """What `_capture` gives, checked to be one forward pass, which `weights` and `allowed`
        join: one call, or the steps of incremental decoding. A step feeds one more query for
        the same rows, and its keys are then every query so far (self-attention) or the same
        source (cross). Anything else is separate passes: a sentence translated by beam search
        (one row at the first step, the beam's after) made torch.cat's "sizes must match", and a
        user's own passes of other lengths came back stacked as if they were decoding steps."""
        capture = self._capture(kind, layer)
        rows, _, queries, keys = capture.weights[0].shape
        for call, part in enumerate(capture.weights[1:], start=2):
            queries += 1  # a step's one query, whose keys (self-attention) are every query so far
            step = (rows, 1, queries if kind != "cross" else keys)
            if (part.size(0), part.size(2), part.size(3)) != step:
                raise RecordingError(
                    f"{kind} layer {layer} was recorded in {len(capture.weights)} calls that are not one forward "
                    f"pass (call {call}: {part.size(0)} rows, {part.size(2)} queries, {part.size(3)} keys; the next "
                    f"decoding step: {rows} rows, 1 query, {step[2]} keys); record one forward pass per `record` "
                    "block, or use model.translate(..., record=True) for a decoded sentence's attention"
                )
        return capture

    def traces(
        self,
        src: Tensor,
        tgt: Tensor | None,
        src_tokens: Sequence[Sequence[str]],
        tgt_tokens: Sequence[Sequence[str]] | None = None,
        model_info: dict | None = None,
        pad_id: int = 0,
    ) -> list[AttentionTrace]:
        """One trace per sentence, padding cut away.

        src: (B, Ls) the encoder input ids; tgt: (B, Lt) decoder inputs (BOS first) or None for an
        encoder-only recording. `tgt_tokens[b]` are the pieces the decoder *produced* at each
        position (y_1 ... </s>), which label the decoder and cross rows.
        """
        if not self.captures:
            raise AttnlabError(
                "nothing was recorded: run the model itself inside the block, in the thread that opened it "
                "(a torch.compile'd model is not recorded)"
            )
        batch = next(iter(self.captures.values())).weights[0].size(0)
        for side, ids in (("src", src), ("tgt", tgt)):  # another batch was an IndexError, a list an AttributeError
            if (ids is not None or side == "src") and not (
                isinstance(ids, Tensor) and ids.dim() == 2 and ids.size(0) == batch and not ids.is_floating_point()
            ):
                got = f"shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
                raise AttnlabError(
                    f"{side} is the (batch, length) tensor of ids of the {batch} sentence(s) recorded, got {got}"
                )
        for what, side, tokens in (("source", "src", src_tokens), ("target", "tgt", tgt_tokens)):
            if (tokens is not None or what == "source") and (  # None was a TypeError from indexing it
                isinstance(tokens, str) or not isinstance(tokens, Sequence) or any(isinstance(t, str) for t in tokens)
            ):
                raise AttnlabError(f"{side}_tokens is a list of each sentence's {what} pieces, got {tokens!r:.60}")
            if tokens is not None and len(tokens) != src.size(0):
                raise AttnlabError(f"{len(tokens)} {what} token lists for a batch of {src.size(0)} sentences")
        traces = []
        src_lens = src.ne(pad_id).sum(1).tolist()
        # Position 0 is the decoder's start token, which Marian models spell as the pad token.
        tgt_lens = [0] * src.size(0) if tgt is None else (1 + tgt[:, 1:].ne(pad_id).sum(1)).tolist()
        full = {key: self.weights(*key) for key in self.captures}
        for b in range(src.size(0)):
            ls, lt = src_lens[b], tgt_lens[b]
            maps: dict[str, list[np.ndarray]] = {}
            masks: dict[str, np.ndarray] = {}
            for kind in KINDS:
                layers = sorted(layer for k, layer in full if k == kind)
                if not layers:
                    continue
                q_len, k_len = {"encoder": (ls, ls), "decoder": (lt, lt), "cross": (lt, ls)}[kind]
                maps[kind] = [full[(kind, layer)][b, :, :q_len, :k_len].numpy().copy() for layer in layers]
                masks[kind] = self._mask(kind, b, q_len, k_len)
            off = [[*point, head] for point, heads in sorted(self.off.items()) for head in heads]
            try:  # labels that do not match the maps made the views and head_stats fail far from here
                trace = AttentionTrace(
                    src_tokens=list(src_tokens[b]),
                    tgt_tokens=list(tgt_tokens[b]) if tgt_tokens is not None else [],
                    maps=maps,
                    masks=masks,
                    layers={kind: sorted(layer for k, layer in full if k == kind) for kind in maps},
                    heads=self.heads,
                    model=dict(model_info or {}),
                    meta={"heads_off": off} if off else {},
                )
            except AttnlabError as damage:
                raise AttnlabError(f"sentence {b}'s tokens do not fit what was recorded: {damage}") from None
            traces.append(trace)
        return traces

    def _mask(self, kind: str, b: int, q_len: int, k_len: int) -> np.ndarray:
        """The mask the layers of `kind` applied, cut to the sentence (the same in every layer)."""
        layer = min(layer for k, layer in self.captures if k == kind)
        return self.allowed(kind, layer)[b, 0, :q_len, :k_len].numpy().copy()

    def allowed(self, kind: str, layer: int) -> Tensor:
        """(B, 1, Lq, Lk) bool: what each call of the hook point allowed, stacked along Lq like
        `weights` (a call without a mask allowed every key that existed then: incremental
        decoding feeds one position at a time, so later keys are False)."""
        capture = self._one_pass(kind, layer)
        parts = []
        for weights, mask in zip(capture.weights, capture.masks, strict=True):
            rows, _, queries, keys = weights.shape
            shape = (rows, 1, queries, keys)
            parts.append(torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape))
        width = max(part.size(-1) for part in parts)
        return torch.cat([torch.nn.functional.pad(part, (0, width - part.size(-1)), value=False) for part in parts], 2)


def transformer_of(model: object) -> Transformer:
    """The network to hook: a `Transformer`, or what `attnlab.load` returns (its `.model`),
    which is what a user has in hand and passes first."""
    inner = model if isinstance(model, Transformer) else getattr(model, "model", None)
    if not isinstance(inner, Transformer):
        raise AttnlabError(f"expected an attnlab model (attnlab.load(...)), got {type(model).__name__}")
    return inner


def index_in(value: object, size: int, what: str) -> int:
    """`value` as an index into `size` things, counted from the end when negative (as Python
    does); a float, a bool or a value out of range is refused, where `% size` would wrap it
    silently onto another layer or head. A tensor or array of one number (`scores.argmax()`)
    is that number: it was refused as "head tensor(1) does not exist"."""
    if isinstance(value, Tensor | np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not -size <= value < size:
        raise AttnlabError(
            f"{what} {value!r} does not exist: this model has {size} (0 to {size - 1}, or -1 from the top)"
        )
    return int(value) % size


def _listed(value: object) -> list:
    """A selection as a list: one kind, layer or head given alone (`kinds="cross"`, `layers=1`)
    is a list of one, where iterating it read "cross" a letter at a time and failed on 1 (and
    on a tensor or array of one number: "iteration over a 0-d tensor")."""
    if isinstance(value, str | numbers.Integral) or not isinstance(value, Iterable) or getattr(value, "ndim", 1) == 0:
        return [value]  # a float or None left in a list: `index_in` names it
    return list(value)


def _some(chosen: Collection | None, what: str) -> None:
    """An empty selection is one line: it recorded nothing, then said "run the model itself
    inside the block", or (`heads=[]`) made a trace of no heads that no view could open."""
    if chosen is not None and not chosen:
        raise AttnlabError(f"{what}=[] records nothing: name at least one, or leave {what}=None for all")


def _selected(
    model: Transformer, kinds: str | Iterable[str] | None, layers: int | Iterable[int] | None
) -> list[MultiHeadAttention]:
    kinds = list(KINDS) if kinds is None else _listed(kinds)
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise AttnlabError(f"unknown attention kind(s) {unknown}; choose from {KINDS}")
    n = model.config.n_layers
    wanted = None if layers is None else {index_in(layer, n, "layer") for layer in _listed(layers)}
    _some(kinds, "kinds")
    _some(wanted, "layers")
    chosen = []
    for module in model.attention_modules():
        kind, layer = hook_point(module)
        if kind in kinds and (wanted is None or layer in wanted):
            chosen.append(module)
    return chosen


@contextmanager
def record(
    model: Transformer,
    kinds: str | Iterable[str] | None = None,
    layers: int | Iterable[int] | None = None,
    heads: int | Sequence[int] | None = None,
    keep_values: bool = False,
) -> Iterator[Recording]:
    """Record attention weights of the selected hook points while the block runs.

    kinds: subset of ("encoder", "decoder", "cross"); layers: indices (negative from the top);
    heads: head indices to keep, each once and in order (1 and -3 of 4 heads are one head, whose
    maps `head_stats` would otherwise count twice). One kind, layer or head may be given alone.
    The hooks are always removed on exit, exceptions included.
    """
    model = transformer_of(model)
    modules = _selected(model, kinds, layers)
    if heads is not None:
        heads = sorted({index_in(head, model.config.n_heads, "head") for head in _listed(heads)})
    _some(heads, "heads")
    busy = [m.name for m in modules if m.hook is not None]
    if busy:
        raise AttnlabError(f"already recording at {busy[0]}; recordings do not nest")
    recording = Recording(model.config.n_layers, heads, check_flag(keep_values, "keep_values"))
    with attached(HOOKS, dict.fromkeys(modules, recording.hook)):
        yield recording


def weights_hash(model: object) -> str:
    """sha256 over the parameters (names, shapes, bytes): the identity a trace carries. `model`
    is a module or what `attnlab.load` returns (an AttributeError, 'parameters', before).

    Cached on the model and recomputed only when a parameter was modified in place since.
    """
    model = model if isinstance(model, torch.nn.Module) else transformer_of(model)
    version = sum(p._version for p in model.parameters())
    cached = getattr(model, "_attnlab_hash", None)
    if cached is not None and cached[0] == version:
        return cached[1]
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        digest.update(name.encode())
        for tensor in value if isinstance(value, tuple) else (value,):  # int8 layers: (weight, bias), dtypes
            if not isinstance(tensor, torch.Tensor):
                digest.update(repr(tensor).encode())
                continue
            tensor = tensor.dequantize() if tensor.is_quantized else tensor
            digest.update(str(tuple(tensor.shape)).encode())
            digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    value = digest.hexdigest()[:16]
    model._attnlab_hash = (version, value)
    return value


def model_info(model: object, checkpoint: str | os.PathLike | None = None) -> dict:
    """What a trace says about the model that produced it: its config, its weights' identity,
    and the precision its maps were computed in (the bundled translator's maps of 20 test2016
    sentences differ from fp32 by up to 0.016 in bf16 and 0.053 in int8, so a trace must say which).
    `model` is a `Transformer` or what `attnlab.load` returns, as in `record` (the latter was an
    AttributeError); a `checkpoint` given as a Path is stored as its string, which a trace file
    can hold (`save` refused the Path, long after)."""
    model = transformer_of(model)
    checkpoint = os.fspath(checkpoint) if isinstance(checkpoint, os.PathLike) else checkpoint
    config = model.config.to_dict()
    config.pop("paper", None)
    info = {"config": config, "weights_sha256": weights_hash(model), "checkpoint": checkpoint}
    return info | {"dtype": computed_in(model)}


def computed_in(model: torch.nn.Module) -> str:
    """ "int8" for dynamically quantized linear layers, else the parameters' float type."""
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return "int8"
    return str(next(p.dtype for p in model.parameters() if p.is_floating_point())).removeprefix("torch.")
