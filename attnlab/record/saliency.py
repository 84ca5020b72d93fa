"""Which input pieces an output piece depends on, by its gradient: saliency, gradient × input.

Attention says where a head looked; it does not say what the output needs (Jain & Wallace 2019,
"Attention is not Explanation", held attention against gradients and found them often apart).
The saliency of input piece j for output piece y_t is ∂p(y_t)/∂e_j · e_j, with e_j the piece's
row of the embedding matrix (before ×√d_model and its position): a first-order estimate of how
much p(y_t) moves as that row grows, summed over its dimensions. Ding et al. (2019,
"Saliency-driven Word Alignment Interpretation for Neural Machine Translation") read it as word
alignment and found it closer to human links than attention; `attnlab align --method saliency`
does so. Both the source pieces and the decoder's input pieces (<s> and the pieces already
written) are inputs, so the map also says how much of each output comes from the source at all.

SmoothGrad (Smilkov et al. 2017), as Ding et al. use it: the gradient averaged over `samples`
copies of the embeddings with Gaussian noise (σ = `noise` × the spread of the sentence's rows),
still multiplied by the rows themselves. The pass is teacher-forced on the trace's pair, with
the heads it recorded switched off switched off again, as the other readings of a trace.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.errors import AttnlabError
from attnlab.record.ablation import ablate
from attnlab.record.importance import BATCH_TOKENS, quantized
from attnlab.record.lens import teacher_forced
from attnlab.record.trace import AttentionTrace, whole_number


@dataclass
class Saliency:
    """∂p(y_t)/∂e_j · e_j of every input piece j for every output piece y_t of one pair."""

    source: list[str]  # the source pieces (the columns of `source_scores`)
    inputs: list[str]  # the decoder's input at each position: <s>, then the output shifted right
    produced: list[str]  # the piece output at each position (the rows)
    source_scores: np.ndarray  # (produced, source): signed saliency of each source piece
    target_scores: np.ndarray  # (produced, inputs): of each decoder input piece; 0 past the row's own
    samples: int  # SmoothGrad's noisy copies (0: the plain gradient)

    def source_rows(self) -> np.ndarray:
        """(produced, source) |saliency| of each row scaled to sum to 1 (a row of all 0 stays 0):
        read as cross-attention is, as alignment or as a map."""
        magnitude = np.abs(self.source_scores)
        total = magnitude.sum(1, keepdims=True)
        return np.divide(magnitude, total, out=np.zeros_like(magnitude), where=total > 0)

    def source_share(self) -> np.ndarray:
        """(produced,) the source's part of each row's |saliency|, against the decoder's inputs:
        how much an output piece depends on what it translates rather than on what it follows."""
        source, target = np.abs(self.source_scores).sum(1), np.abs(self.target_scores).sum(1)
        total = source + target
        return np.divide(source, total, out=np.zeros_like(source), where=total > 0)


def check_samples(samples: object, name: str = "samples") -> int:
    """`samples` as SmoothGrad's count of noisy copies, refused in one line naming `name` unless a
    whole number in [0, 1000]; `attnlab align` checks its `--samples` (or its card's) here before
    it decodes any line, where the refusal once came only after the model had run."""
    if not (whole_number(samples) and 0 <= samples <= 1000):
        raise AttnlabError(f"{name} is a whole number of noisy copies in [0, 1000], got {samples!r}")
    return int(samples)


@torch.inference_mode(False)  # a caller's inference mode would forbid the gradient
def saliency(
    model: Any,
    trace: AttentionTrace,
    samples: int = 0,
    noise: float = 0.15,
    seed: int = 0,
    check: Callable[[], None] | None = None,
) -> Saliency:
    """The saliency of every input piece for every output piece of `trace`'s pair, for `model`
    (what `attnlab.load` returns; the model that recorded `trace`, in fp32 or bf16: no gradient
    passes through int8), in eval mode. `samples` > 0: SmoothGrad over that many noisy copies,
    drawn from `seed`. `check` is called before each pass forward and back and may raise to stop:
    a server's time limit (a parser's 300-piece output with SmoothGrad took 6 minutes, and every
    other visitor waited)."""
    net, src, tgt, produced, heads = teacher_forced(model, trace, "gradient saliency")
    if quantized(net):
        raise AttnlabError("gradient saliency differentiates through the model: open it in fp32 or bf16, not int8")
    if net.training:  # dropout would make every gradient a random draw
        raise AttnlabError("gradient saliency reads a model in eval mode; call .eval() on it first")
    check_samples(samples)
    if not (isinstance(noise, numbers.Real) and not isinstance(noise, bool) and 0.0 <= noise <= 10.0):
        raise AttnlabError(f"noise is a share of the embeddings' spread in [0, 10], got {noise!r}")
    if not (whole_number(seed) and 0 <= seed < 2**63):  # (torch's generator takes a signed 64-bit seed)
        raise AttnlabError(f"seed is a whole number in [0, 2**63), got {seed!r}")
    samples, noise, seed = int(samples), float(noise), int(seed)
    with torch.no_grad():
        rows = net.embed(src), net.target_embedding(tgt)  # (1, L, d) each
    target = torch.tensor(produced)
    scores = [torch.zeros(len(produced), row.size(1), dtype=torch.float64) for row in rows]
    generator = torch.Generator().manual_seed(seed)
    per_pass = max(1, BATCH_TOKENS // (src.size(1) + tgt.size(1)))  # output positions read in one pass
    for start in range(0, len(produced), per_pass):
        positions = torch.arange(start, min(len(produced), start + per_pass))
        for _ in range(max(1, samples)):
            if check is not None:
                check()
            noisy = [_noisy(row, len(positions), noise if samples else 0.0, generator) for row in rows]
            grads = _gradients(net, src, tgt, noisy, positions, target[positions], heads)
            for total, grad, row in zip(scores, grads, rows, strict=True):
                total[positions] += (grad.double() * row.double()).sum(-1)
    source_scores, target_scores = (total.numpy() / max(1, samples) for total in scores)
    return Saliency(
        source=list(trace.src_tokens),
        inputs=list(trace.tgt_input_tokens),
        produced=list(trace.tgt_tokens),
        source_scores=source_scores,
        target_scores=np.tril(target_scores),  # (a later input is masked from the row: exactly 0)
        samples=samples,
    )


def _noisy(row: Tensor, copies: int, noise: float, generator: torch.Generator) -> Tensor:
    """`copies` copies of one sentence's rows (1, L, d), with Gaussian noise of σ = `noise` × their
    spread (max − min), as leaves whose gradient is read."""
    rows = row.expand(copies, -1, -1).clone()
    if noise:
        spread = float(row.max() - row.min())
        rows += torch.randn(rows.shape, generator=generator).to(rows.dtype) * (noise * spread)
    return rows.requires_grad_()


def _gradients(
    net: Any,
    src: Tensor,
    tgt: Tensor,
    rows: list[Tensor],
    positions: Tensor,
    target: Tensor,
    heads: dict[tuple[str, int], list[int]],
) -> tuple[Tensor, ...]:
    """∂p(target_b at position_b)/∂rows for each copy b of the pair: the copies of a batch do not
    see each other, so the gradient of the sum of their probabilities is each one's own."""
    copies = len(positions)
    src, tgt = src.expand(copies, -1), tgt.expand(copies, -1)
    with torch.enable_grad(), ablate(net, heads):
        mask = net.src_mask(src)
        hidden = net.decode(tgt, net.encode(src, mask, rows=rows[0]), mask, rows=rows[1])
        logits = net.logits(hidden[torch.arange(copies), positions]).double()  # (bf16 logits: softmax in full)
        probability = torch.softmax(logits, -1).gather(1, target[:, None])
        return torch.autograd.grad(probability.sum(), rows)
