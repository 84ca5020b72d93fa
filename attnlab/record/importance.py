"""Which heads a model needs for an output: head importance (Michel, Levy & Neubig, 2019, "Are
Sixteen Heads Really Better than One?").

Every head's output is multiplied by a gate ξ_h = 1 before W^O (the mask `attnlab.ablate` sets to
0 to switch a head off). A head's importance is how much a sentence's log-likelihood depends on
its gate, I_h = E_x |∂ log P(y | x) / ∂ξ_h|, teacher-forced on the sentence pairs: one backward
pass gives every head's, for every sentence of a batch at once (one gate per sentence and head).
The gradient is the first-order estimate of switching the head off; `exact=True` also measures
that, one head at a time: E_x [log P(y | x) − log P(y | x; h off)], one forward pass per head. As
Michel et al. do, the pruning order compares heads after each (kind, layer)'s scores are divided
by their ℓ2 norm, so that no layer is emptied first only because its gradients are small.

Here: one trace's pair (`trace_importance`, which the explorer shows) and the computation on
token ids; `attnlab.decode.importance` reads a corpus and draws the pruning curve.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_MASKS, attached
from attnlab.model.transformer import Transformer
from attnlab.record.ablation import ablate
from attnlab.record.equation import check_same_model, trace_ids
from attnlab.record.recorder import hook_point
from attnlab.record.stats import check_trace
from attnlab.record.trace import KINDS, AttentionTrace, check_flag

BATCH_TOKENS = 2000  # target pieces scored together: (tokens × vocabulary) log-probabilities, 0.3 GB at 37k


@dataclass
class HeadImportance:
    """Every head's importance over some sentence pairs; arrays are (kinds, layers, heads), kinds
    in `KINDS` order (encoder self-attention, decoder self-attention, encoder–decoder)."""

    gradient: np.ndarray  # E_x |∂ log P(y|x) / ∂ξ_h| (Michel et al.'s I_h, in nats per unit gate)
    ablation: np.ndarray | None  # E_x [log P(y|x) − log P(y|x; h off)] in nats; None unless exact
    sentences: int
    tokens: int  # target pieces scored, </s> included

    def normalized(self, measure: str = "gradient") -> np.ndarray:
        """`measure`'s scores divided by their (kind, layer)'s ℓ2 norm (a layer of zeros stays 0)."""
        scores = self.scores(measure)
        norms = np.linalg.norm(scores, axis=-1, keepdims=True)
        return np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)

    def order(self, measure: str = "gradient", per_layer: bool = True) -> list[tuple[str, int, int]]:
        """Every head as (kind, layer, head), least important first: by the scores normalised per
        layer (Michel et al.), or with `per_layer=False` by the scores as measured, which compares
        heads across layers and keeps more of a translator's BLEU once most heads are off
        (docs/EXPERIMENTS.md). Ties keep KINDS, layer, head order."""
        flat = (self.normalized(measure) if check_flag(per_layer, "per_layer") else self.scores(measure)).ravel()
        shape = self.gradient.shape
        return [head_at(int(i), shape) for i in np.argsort(flat, kind="stable")]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per head (kind, layer, head, gradient, normalised, ablation), for JSON and tables."""
        normalized = self.normalized()
        out = []
        for index in range(self.gradient.size):
            kind, layer, head = head_at(index, self.gradient.shape)
            k = KINDS.index(kind)
            row = {"kind": kind, "layer": layer, "head": head, "gradient": float(self.gradient[k, layer, head])}
            row["normalized"] = float(normalized[k, layer, head])
            row["ablation"] = None if self.ablation is None else float(self.ablation[k, layer, head])
            out.append(row)
        return out

    def scores(self, measure: str = "gradient") -> np.ndarray:
        """The (kinds, layers, heads) scores of `measure`, as measured."""
        if measure == "gradient":
            return self.gradient
        if measure == "ablation" and self.ablation is not None:
            return self.ablation
        known = "gradient or ablation (with exact=True)" if self.ablation is None else "gradient or ablation"
        raise AttnlabError(f"head importance is measured by {known}, not {measure!r}")


def head_at(index: int, shape: tuple[int, ...]) -> tuple[str, int, int]:
    """(kind, layer, head) of a flat index into a (kinds, layers, heads) array."""
    k, layer, head = np.unravel_index(index, shape)
    return KINDS[int(k)], int(layer), int(head)


def trace_importance(model: Any, trace: AttentionTrace, exact: bool = False) -> HeadImportance:
    """Every head's importance for the one sentence pair of `trace` (recorded by `model`), with
    the heads that were off when it was recorded off again: their gates read 0."""
    check_model(model)
    check_trace(trace, "the trace")
    src_ids, produced = trace_ids(model, trace)
    check_same_model(model.model, trace, "its heads would be weighed on an output it did not produce")
    if not produced:
        raise AttnlabError("the trace has no target pieces: there is no output to weigh the heads on")
    with ablate(model.model, trace.heads_off):
        return pair_importance(model.model, [(src_ids, produced)], exact)


def check_model(model: Any, what: str = "head importance") -> None:
    """What `attnlab.load` returns; for head importance, in a precision that can be differentiated
    (`what`: the reading that needs the model, named in the refusal)."""
    if not (isinstance(getattr(model, "model", None), Transformer) and hasattr(model, "target_tokenizer")):
        raise AttnlabError(f"{what} needs a model from attnlab.load(...), got {type(model).__name__}")
    if what == "head importance" and quantized(model.model):
        raise AttnlabError("head importance differentiates through the model: open it in fp32 or bf16, not int8")


def quantized(net: Any) -> bool:
    """Whether `net` holds int8 weights (dynamic quantization), which no gradient passes through."""
    return any(not p.is_floating_point() for p in net.state_dict().values())


def pair_importance(net: Any, pairs: list[tuple[list[int], list[int]]], exact: bool = False) -> HeadImportance:
    """Every head's importance over (source ids, target ids ending in </s>) pairs, for `net`, a
    `Transformer`, in eval mode while it runs."""
    gradient, ablation = sentence_importance(net, pairs, exact)
    mean = None if ablation is None else ablation.mean(0)
    return HeadImportance(gradient.mean(0), mean, len(pairs), sum(len(p) for _, p in pairs))


def sentence_importance(
    net: Any, pairs: list[tuple[list[int], list[int]]], exact: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each pair's |∂ log P(y|x) / ∂ξ_h| (and with `exact` its log P lost with each head off), as
    (pairs, kinds, layers, heads) arrays in the pairs' order: what a corpus profile keeps per
    sentence, and what `pair_importance` averages."""
    config = net.config
    points = [hook_point(m) for m in net.attention_modules()]
    shape = (len(pairs), len(KINDS), config.n_layers, config.n_heads)
    gradient, ablation = np.zeros(shape), np.zeros(shape) if check_flag(exact, "exact") else None
    was_training, device = net.training, next(net.parameters()).device
    net.eval()  # no dropout: the model as it decodes
    try:
        with torch.inference_mode(False):  # (a caller's inference mode would forbid the gradient)
            for rows, batch in _batches(pairs, config):
                src, tgt_in, target = (t.to(device) for t in batch)  # (the trainer's model may be on a GPU)
                grads, base = _gate_gradients(net, src, tgt_in, target)
                for (kind, layer), grad in zip(points, grads, strict=True):
                    gradient[rows, KINDS.index(kind), layer] = grad.abs().double().cpu().numpy()
                if ablation is not None:
                    for (kind, layer), head in ((p, h) for p in points for h in range(config.n_heads)):
                        with torch.no_grad(), ablate(net, {(kind, layer): [head]}):
                            off = _log_likelihood(net, src, tgt_in, target)
                        ablation[rows, KINDS.index(kind), layer, head] = (base - off).double().cpu().numpy()
    finally:
        net.train(was_training)
    return gradient, ablation


def _batches(
    pairs: list[tuple[list[int], list[int]]], config: Any
) -> Iterator[tuple[list[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """(indices into `pairs`, (source ids, decoder input, target)) batches of similar lengths,
    padded, each at most `BATCH_TOKENS` target positions (a longer sentence alone)."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][1]))
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * len(pairs[order[end]][1]) <= BATCH_TOKENS:
            end += 1
        chunk = [pairs[i] for i in order[start:end]]
        width, length = max(len(s) for s, _ in chunk), max(len(t) for _, t in chunk)
        pad = config.pad_id
        src = torch.tensor([s + [pad] * (width - len(s)) for s, _ in chunk])
        tgt_in = torch.tensor([[config.bos_id, *t[:-1]] + [pad] * (length - len(t)) for _, t in chunk])
        target = torch.tensor([t + [pad] * (length - len(t)) for _, t in chunk])
        yield order[start:end], (src, tgt_in, target)
        start = end


def _log_likelihood(net: Any, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B,) log P(target | source) of each sentence, padding left out."""
    return token_log_probs(net, src, tgt_in, target).sum(-1)


def token_log_probs(net: Any, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, Lt) log P(target_t | target_<t, source), teacher-forced; 0 at padding."""
    lprobs = torch.log_softmax(net(src, tgt_in).float(), -1).gather(-1, target[..., None]).squeeze(-1)
    return lprobs.masked_fill(target == net.config.pad_id, 0.0)


def _gate_gradients(
    net: Any, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """∂ log P(y_b | x_b) / ∂ξ_{b,h} for every hook point, (B, h) each, and the (B,) log-likelihoods.
    Sentences of a batch do not see each other, so the gradient of their sum is each one's own.
    A gate multiplies the mask of an enclosing `ablate`, so a head already off stays off (and its
    gradient is 0). Only the gates' gradients are taken: the weights' `.grad` is left untouched."""
    modules = net.attention_modules()
    enclosing = HEAD_MASKS.get()
    gates = [torch.ones(src.size(0), net.config.n_heads, device=src.device, requires_grad=True) for _ in modules]
    masks = {
        m: gate if enclosing.get(m) is None else gate * enclosing[m] for m, gate in zip(modules, gates, strict=True)
    }
    with torch.enable_grad(), attached(HEAD_MASKS, masks):
        logp = _log_likelihood(net, src, tgt_in, target)
        grads = torch.autograd.grad(logp.sum(), gates)
    return grads, logp.detach()
