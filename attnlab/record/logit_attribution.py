"""Direct logit attribution (TransformerLens's `logit_attrs`; Elhage et al., 2021), made exact for
the paper's post-LN stack: how much each decoder head, each feed-forward layer, the embeddings and
the biases wrote, directly, into the logit of the piece the model output at each position.

In a pre-norm stack the residual stream is a sum (x + Σ sublayers), so each part's share of the
logit is its output read through the final LayerNorm and the pre-softmax projection, which is all
TransformerLens does. The paper's stack is post-norm (§3.1: LayerNorm(x + Sublayer(x)) after every
sub-layer), so every later LayerNorm rescales what a part wrote, and nothing sums at first sight.
It does sum exactly once each LayerNorm is read at the scale it really had in this pass:
LN(z) = γ ⊙ (z − mean z)/σ + β is then linear in z, so its output splits into one term per part
that went into z, each centred and scaled by γ/σ, plus β. Going down from the logit, the readout
direction r (the output piece's row of the projection, less the contrast's) is pulled back through
each LayerNorm, r ← (γ ⊙ r − mean(γ ⊙ r))/σ, and each part's share is its output · r at the depth
where it was added: the shares add up to the logit the model computed (tested to rounding). A part
written low down is shrunk by every LayerNorm above it; that is part of what it did, not an error.

A head's part is its output through its own columns of W^O (§3.2.2); the encoder–decoder heads'
parts are split again by source position (a · v W^O for each key), which says which source pieces
the decoder read directly into each output piece. The attention and feed-forward output biases and
every LayerNorm's β go into one `bias` share: they do not depend on the sentence.

Logits mean something only relative to each other (the softmax ignores a constant added to all), so
the logit read is the output piece's against a contrast: the mean over the vocabulary (`"mean"`),
the model's likeliest other piece at that position (`"runner-up"`: who made the choice), or one
piece named. The pass is teacher-forced on the trace's pair with its switched-off heads off again,
as the logit lens reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.model.hooks import HOOKS, attached
from attnlab.record.ablation import ablate
from attnlab.record.lens import teacher_forced
from attnlab.record.trace import AttentionTrace, whole_number

AGAINST = ("mean", "runner-up")  # or a piece of the target vocabulary


@dataclass
class LogitAttribution:
    """Each part's direct share of the logit of the piece output at each target position."""

    inputs: list[str]  # the decoder's input at each position: <s>, then the output shifted right
    produced: list[str]  # the piece output at each position (the trace's target, </s> last)
    source: list[str]  # the source pieces (the columns of `cross_source`)
    against: str  # "mean", "runner-up" or a piece: what each logit is read against
    contrast: list[str]  # the piece each position's logit is read against ("" for the mean)
    self_heads: np.ndarray  # (layers, heads, positions): each decoder self-attention head's share
    cross_heads: np.ndarray  # (layers, heads, positions): each encoder–decoder head's share
    ffn: np.ndarray  # (layers, positions): each feed-forward layer's share (its bias in `bias`)
    embedding: np.ndarray  # (positions,): the input piece's embedding × √d_model
    position: np.ndarray  # (positions,): the positional encoding (§3.5)
    bias: np.ndarray  # (positions,): every output bias and LayerNorm β, and a Marian model's logit bias
    cross_source: np.ndarray  # (layers, heads, positions, source positions): `cross_heads` by key
    logit: np.ndarray  # (positions,): the model's own logit of the piece, less the contrast's

    @property
    def total(self) -> np.ndarray:
        """(positions,) the shares summed: the model's `logit`, to rounding."""
        heads = self.self_heads.sum((0, 1)) + self.cross_heads.sum((0, 1))
        return heads + self.ffn.sum(0) + self.embedding + self.position + self.bias

    def parts(self, position: int) -> dict[str, float]:
        """{name: share} at one position, largest in size first: "decoder L2 H5" (the decoder
        self-attention's layer 2, head 5), "cross L1 H0", "ffn L3", "embedding", "position", "bias"."""
        position = self.index(position)
        shares = {"embedding": self.embedding[position], "position": self.position[position]}
        for kind, grid in (("decoder", self.self_heads), ("cross", self.cross_heads)):
            for layer, head in np.ndindex(grid.shape[:2]):
                shares[f"{kind} L{layer} H{head}"] = grid[layer, head, position]
        shares |= {f"ffn L{layer}": self.ffn[layer, position] for layer in range(len(self.ffn))}
        shares["bias"] = self.bias[position]
        return {name: float(v) for name, v in sorted(shares.items(), key=lambda kv: -abs(kv[1]))}

    def writer(self, position: int) -> str | None:
        """The part with the largest share in size at `position` (a name of `parts`), or None
        where every share is 0: the piece output there is the one it is read against, so the
        readout is 0 and nothing wrote for it. Naming the first of a tie of zeros there (it
        named "embedding") counted a writer that wrote nothing."""
        parts = self.parts(position)
        return next(iter(parts)) if any(parts.values()) else None

    def index(self, position: object) -> int:
        """`position` as an index into `produced` (a negative one counts from the end), or one line
        worded as `attnlab.viz.selection.pick` words a head (the figure takes it here): 99 was NumPy's IndexError,
        1.0 and "1" were too, and True or None indexed the arrays as a mask or a new axis and
        failed as "the truth value of an array is ambiguous"."""
        n = len(self.produced)
        if whole_number(position) and -n <= position < n:
            return int(position) % n
        choices = ", ".join(map(str, range(n))) + " (-1: the last)" if n else "nothing yet"
        raise AttnlabError(f"no position {position!r}: choose from {choices}")


@dataclass
class _Block:
    """One residual block of the pass: what it read, what its sub-layer wrote, and that split."""

    kind: str  # "self", "cross" or "ffn"
    norm: nn.LayerNorm  # the block's LayerNorm (post-norm: after the sum; pre-norm: before the sub-layer)
    x: Tensor  # (Lt, d) the block's input
    out: Tensor  # (Lt, d) what the sub-layer wrote, its output bias included
    bias: Tensor  # (d,) that output bias
    w_o: Tensor | None = None  # (d, h, d_v) an attention sub-layer's W^O, by head
    heads: Tensor | None = None  # (h, Lt, d_v) each head's output
    weights: Tensor | None = None  # (h, Lt, Lk) its attention weights (0 for a head switched off)
    values: Tensor | None = None  # (h, Lk, d_v) its values


def logit_attribution(model: Any, trace: AttentionTrace, against: str = "mean") -> LogitAttribution:
    """Every decoder part's direct share of each output piece's logit, for `model` (what
    `attnlab.load` returns; the model that recorded `trace`), teacher-forced on the trace's pair.
    `against`: "mean" (the vocabulary's mean logit), "runner-up" (each position's likeliest other
    piece) or a piece of the target vocabulary."""
    net, src, tgt, produced, heads = teacher_forced(model, trace, "direct logit attribution")
    vocab = model.target_tokenizer
    if not (
        isinstance(against, str) and (against in AGAINST or vocab.id_to_piece(vocab.piece_to_id(against)) == against)
    ):
        raise AttnlabError(f"against is 'mean', 'runner-up' or a piece of the target vocabulary, got {against!r}")
    if net.training:  # dropout would make every share a random draw
        raise AttnlabError("direct logit attribution reads a model in eval mode; call .eval() on it first")
    config = net.config
    blocks, top = _forward(net, src, tgt, heads)
    final = net.final_norms[1] if net.final_norms else None
    with torch.no_grad():
        logits = net.logits(top if final is None else final(top)).double()[0]  # (Lt, V)
    target = torch.tensor(produced)
    contrast = _contrast(logits, target, against, vocab)
    table = (net.target_embedding.weight if config.tie_output else linear_weight(net.out_proj)).detach().double()
    r = table[target] - (table.mean(0) if contrast is None else table[contrast])  # (Lt, d) the readout
    logit = logits.gather(1, target[:, None])[:, 0]
    logit -= logits.mean(1) if contrast is None else logits.gather(1, contrast[:, None])[:, 0]
    bias = torch.zeros(len(produced), dtype=torch.float64)
    if config.logits_bias:
        b = net.logits_bias.double()
        bias += b[target] - (b.mean() if contrast is None else b[contrast])
    if final is not None:  # pre-norm: the final LayerNorm reads the whole summed stream, once
        bias += _beta(final) @ r.T
        r = _pull(final, top[0].double(), r)
    n, h = config.n_layers, config.n_heads
    shares = {kind: torch.zeros(n, h, len(produced), dtype=torch.float64) for kind in ("self", "cross")}
    ffn = torch.zeros(n, len(produced), dtype=torch.float64)
    cross_source = torch.zeros(n, h, len(produced), src.size(1), dtype=torch.float64)
    for index in range(len(blocks) - 1, -1, -1):  # down the stack, pulling r back through each LayerNorm
        block, layer = blocks[index], index // 3
        if config.norm == "post":  # LN(x + out): everything in x and in out is read through it
            bias += _beta(block.norm) @ r.T
            r = _pull(block.norm, block.x + block.out, r)
        bias += block.bias @ r.T
        if block.w_o is None:
            ffn[layer] = ((block.out - block.bias) * r).sum(1)
            continue
        read = torch.einsum("td,dhv->htv", r, block.w_o)  # r through each head's columns of W^O
        shares[block.kind][layer] = (block.heads * read).sum(-1)
        if block.kind == "cross":
            cross_source[layer] = torch.einsum("htk,hkv,htv->htk", block.weights, block.values, read)
    token = net.target_embedding(tgt[0]).detach().double() * net.embed_scale
    return LogitAttribution(
        inputs=list(trace.tgt_input_tokens),
        produced=list(trace.tgt_tokens),
        source=list(trace.src_tokens),
        against=against,
        contrast=[""] * len(produced) if contrast is None else [vocab.id_to_piece(i) for i in contrast.tolist()],
        self_heads=shares["self"].numpy(),
        cross_heads=shares["cross"].numpy(),
        ffn=ffn.numpy(),
        embedding=(token * r).sum(1).numpy(),
        position=((blocks[0].x - token) * r).sum(1).numpy(),
        bias=bias.numpy(),
        cross_source=cross_source.numpy(),
        logit=logit.numpy(),
    )


def _forward(
    net: Any, src: Tensor, tgt: Tensor, heads: dict[tuple[str, int], list[int]]
) -> tuple[list[_Block], Tensor]:
    """The decoder's teacher-forced pass (`Transformer.decode`'s loop), keeping every residual
    block's input and output and every head's output: the blocks, in order, and the top layer's
    output (1, Lt, d). Heads' outputs come through the recording hook (`attnlab.model.hooks`), per
    thread, so a model shared by a server's sessions is read for this caller only."""
    seen: dict[Any, tuple[Tensor, Tensor, Tensor]] = {}

    def keep(module: Any, weights: Tensor, mask: Tensor | None, values: Tensor) -> None:
        gate = module.head_mask  # a switched-off head wrote nothing: its weights count as 0
        if gate is not None:
            weights = weights * gate.to(weights.dtype).reshape(1, -1, 1, 1)
        weights, values = weights[0].double(), values[0].double()
        seen[module] = (weights @ values, weights, values)  # (h, Lq, d_v): what `_attend` hands to W^O

    layers = net.decoder["layers"]
    hooks = {module: keep for layer in layers for module in (layer.self_attn, layer.cross_attn)}
    blocks: list[_Block] = []
    with torch.no_grad(), ablate(net, heads), attached(HOOKS, hooks):
        mask = net.src_mask(src)
        memory = net.encode(src, mask)
        x = net.embed_tokens(tgt, 0, net.target_embedding)
        causal = net.causal_mask(tgt.size(1))
        for layer in layers:
            sublayers = (
                ("self", layer.res_self, layer.self_attn, partial(layer.self_attn, mask=causal)),
                ("cross", layer.res_cross, layer.cross_attn, partial(layer.cross_attn, memory=memory, mask=mask)),
                ("ffn", layer.res_ffn, None, layer.ffn),
            )
            for kind, residual, attention, sublayer in sublayers:
                written: list[Tensor] = []  # the model's own residual block, with what its sub-layer wrote kept
                x_next = residual(x, lambda y, f=sublayer, keep=written: keep.append(f(y)) or keep[0])
                output = layer.ffn.w_2 if attention is None else attention.w_o
                block = _Block(kind, residual.norm, x[0].double(), written[0][0].double(), _bias(output))
                if attention is not None:
                    block.heads, block.weights, block.values = seen[attention]
                    block.w_o = linear_weight(attention.w_o).view(block.out.size(-1), block.heads.size(0), -1)
                blocks.append(block)
                x = x_next
    return blocks, x


def _contrast(logits: Tensor, target: Tensor, against: str, vocab: Any) -> Tensor | None:
    """(Lt,) the piece each position's logit is read against, or None for the vocabulary's mean."""
    if against == "mean":
        return None
    if against == "runner-up":
        return logits.scatter(1, target[:, None], float("-inf")).argmax(1)
    return torch.full_like(target, vocab.piece_to_id(against))


def _pull(norm: nn.LayerNorm, z: Tensor, r: Tensor) -> Tensor:
    """r (Lt, d), read at a LayerNorm's output, pulled back to its input z (Lt, d) at the scale σ
    it had there: c · r_back = (γ ⊙ (c − mean c)/σ) · r for any part c of z."""
    g = r * _gamma(norm)
    sigma = (z.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    return (g - g.mean(-1, keepdim=True)) / sigma


def _gamma(norm: nn.LayerNorm) -> Tensor | float:
    return 1.0 if norm.weight is None else norm.weight.detach().double()


def _beta(norm: nn.LayerNorm) -> Tensor:
    return torch.zeros(norm.normalized_shape, dtype=torch.float64) if norm.bias is None else norm.bias.detach().double()


def linear_weight(linear: nn.Module) -> Tensor:
    """A linear layer's (out, in) weight as a float tensor; an int8 one (`attnlab.load(dtype="int8")`) dequantized."""
    weight = linear.weight() if callable(linear.weight) else linear.weight
    return (weight.dequantize() if weight.is_quantized else weight).detach().double()


def _bias(linear: nn.Module) -> Tensor:
    bias = linear.bias() if callable(linear.bias) else linear.bias
    return torch.zeros(linear_weight(linear).size(0), dtype=torch.float64) if bias is None else bias.detach().double()
