"""Which heads the model needs: head importance (Michel, Levy & Neubig, 2019, "Are Sixteen Heads
Really Better than One?") and the pruning curve it orders (their Fig. 3; Voita et al., 2019, did
the same for a Transformer translator and found most heads could go).

Every head's output is multiplied by a gate ξ_h = 1 before W^O (the mask `attnlab.ablate` sets to
0 to switch a head off). A head's importance is how much a sentence's log-likelihood depends on
its gate, I_h = E_x |∂ log P(y | x) / ∂ξ_h|, teacher-forced on the sentence pairs given: one
backward pass gives every head's, for every sentence of a batch at once (one gate per sentence
and head). The gradient is the first-order estimate of switching the head off; `exact=True` also
measures that, one head at a time: E_x [log P(y | x) − log P(y | x; h off)], one forward pass per
head. As Michel et al. do, the pruning order compares heads after each (kind, layer)'s scores are
divided by their ℓ2 norm, so that no layer is emptied first only because its gradients are small.

`pruning_curve` switches heads off in that order, least important first, and decodes a test set
at each step: BLEU (sacreBLEU, with its signature) for a translator, bracket F1 for a parser.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.decode.api import Model
from attnlab.decode.evaluate import bleu_chrf, bleu_tokenize, parse_report
from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_MASKS, attached
from attnlab.record.ablation import ablate, trace_heads_off
from attnlab.record.equation import check_same_model, trace_ids
from attnlab.record.recorder import hook_point
from attnlab.record.stats import check_trace
from attnlab.record.trace import KINDS, AttentionTrace

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
        scores = self._scores(measure)
        norms = np.linalg.norm(scores, axis=-1, keepdims=True)
        return np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)

    def order(self, measure: str = "gradient") -> list[tuple[str, int, int]]:
        """Every head as (kind, layer, head), least important first by the normalised scores; ties
        keep KINDS, layer, head order."""
        flat = self.normalized(measure).ravel()
        shape = self.gradient.shape
        return [_head(int(i), shape) for i in np.argsort(flat, kind="stable")]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per head (kind, layer, head, gradient, normalised, ablation), for JSON and tables."""
        normalized = self.normalized()
        out = []
        for index in range(self.gradient.size):
            kind, layer, head = _head(index, self.gradient.shape)
            k = KINDS.index(kind)
            row = {"kind": kind, "layer": layer, "head": head, "gradient": float(self.gradient[k, layer, head])}
            row["normalized"] = float(normalized[k, layer, head])
            row["ablation"] = None if self.ablation is None else float(self.ablation[k, layer, head])
            out.append(row)
        return out

    def _scores(self, measure: str) -> np.ndarray:
        if measure == "gradient":
            return self.gradient
        if measure == "ablation" and self.ablation is not None:
            return self.ablation
        known = "gradient or ablation (with exact=True)" if self.ablation is None else "gradient or ablation"
        raise AttnlabError(f"head importance is measured by {known}, not {measure!r}")


def _head(index: int, shape: tuple[int, ...]) -> tuple[str, int, int]:
    k, layer, head = np.unravel_index(index, shape)
    return KINDS[int(k)], int(layer), int(head)


def head_importance(
    model: Model,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    *,
    exact: bool = False,
    truncate: bool = False,
) -> HeadImportance:
    """Every head's importance on `sources` with their `references` read teacher-forced (a
    parser's: trees), or without references on the model's own outputs (its task's search)."""
    _check_model(model)
    if isinstance(sources, str) or not sources:
        raise AttnlabError("head importance needs a list of one or more source sentences")
    if references is None:
        references = model.translate(list(sources), truncate=truncate)
    elif isinstance(references, str) or len(references) != len(sources):
        raise AttnlabError(f"{len(sources)} sources need as many references, got {_count(references)}")
    pairs = []
    for source, target in zip(sources, references, strict=True):
        pieces, _ = model.encode_target(target, truncate)
        pairs.append((model.encode_source(source, truncate)[0], [*pieces, model.config.eos_id]))
    return _importance(model.model, pairs, exact)


def trace_importance(model: Model, trace: AttentionTrace, exact: bool = False) -> HeadImportance:
    """Every head's importance for the one sentence pair of `trace` (recorded by `model`), with
    the heads that were off when it was recorded off again: their gates read 0."""
    _check_model(model)
    check_trace(trace, "the trace")
    src_ids, produced = trace_ids(model, trace)
    check_same_model(model.model, trace, "its heads would be weighed on an output it did not produce")
    if not produced:
        raise AttnlabError("the trace has no target pieces: there is no output to weigh the heads on")
    with ablate(model.model, trace_heads_off(trace)):
        return _importance(model.model, [(src_ids, produced)], exact)


def _count(value: Any) -> str:
    return "one text" if isinstance(value, str) else f"{len(value)}" if hasattr(value, "__len__") else repr(value)


def _check_model(model: Any) -> None:
    if not isinstance(model, Model):
        raise AttnlabError(f"head importance needs a model from attnlab.load(...), got {type(model).__name__}")
    if any(not p.is_floating_point() for p in model.model.state_dict().values()):
        raise AttnlabError("head importance differentiates through the model: open it in fp32 or bf16, not int8")


def _importance(net: Any, pairs: list[tuple[list[int], list[int]]], exact: bool) -> HeadImportance:
    config = net.config
    points = [hook_point(m) for m in net.attention_modules()]
    shape = (len(KINDS), config.n_layers, config.n_heads)
    gradient, ablation = np.zeros(shape), np.zeros(shape) if exact else None
    was_training = net.training
    net.eval()  # no dropout: the model as it decodes
    try:
        with torch.inference_mode(False):  # (a caller's inference mode would forbid the gradient)
            for src, tgt_in, target in _batches(pairs, config):
                grads, base = _gate_gradients(net, src, tgt_in, target)
                for (kind, layer), grad in zip(points, grads, strict=True):
                    gradient[KINDS.index(kind), layer] += grad.abs().sum(0).double().numpy()
                if ablation is not None:
                    for (kind, layer), head in ((p, h) for p in points for h in range(config.n_heads)):
                        with torch.no_grad(), ablate(net, {(kind, layer): [head]}):
                            off = _log_likelihood(net, src, tgt_in, target)
                        ablation[KINDS.index(kind), layer, head] += float((base - off).sum())
    finally:
        net.train(was_training)
    n = len(pairs)
    return HeadImportance(gradient / n, None if ablation is None else ablation / n, n, sum(len(p) for _, p in pairs))


def _batches(
    pairs: list[tuple[list[int], list[int]]], config: Any
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(source ids, decoder input, target) batches of similar lengths, padded, each at most
    `BATCH_TOKENS` target positions (a longer sentence alone)."""
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
        yield src, tgt_in, target
        start = end


def _log_likelihood(net: Any, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B,) log P(target | source) of each sentence, padding left out."""
    lprobs = torch.log_softmax(net(src, tgt_in).float(), -1).gather(-1, target[..., None]).squeeze(-1)
    return lprobs.masked_fill(target == net.config.pad_id, 0.0).sum(-1)


def _gate_gradients(
    net: Any, src: torch.Tensor, tgt_in: torch.Tensor, target: torch.Tensor
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """∂ log P(y_b | x_b) / ∂ξ_{b,h} for every hook point, (B, h) each, and the (B,) log-likelihoods.
    Sentences of a batch do not see each other, so the gradient of their sum is each one's own.
    A gate multiplies the mask of an enclosing `ablate`, so a head already off stays off (and its
    gradient is 0). Only the gates' gradients are taken: the weights' `.grad` is left untouched."""
    modules = net.attention_modules()
    enclosing = HEAD_MASKS.get()
    gates = [torch.ones(src.size(0), net.config.n_heads, requires_grad=True) for _ in modules]
    masks = {
        m: gate if enclosing.get(m) is None else gate * enclosing[m] for m, gate in zip(modules, gates, strict=True)
    }
    with torch.enable_grad(), attached(HEAD_MASKS, masks):
        logp = _log_likelihood(net, src, tgt_in, target)
        grads = torch.autograd.grad(logp.sum(), gates)
    return grads, logp.detach()


def pruning_curve(
    model: Model,
    order: Sequence[tuple[str, int, int]],
    sources: Sequence[str],
    references: Sequence[str],
    steps: Sequence[int],
    **search: Any,
) -> list[dict[str, Any]]:
    """Decode `sources` with the first k heads of `order` switched off, for each k in `steps`, and
    score against `references`: one row per k (heads off, their share, BLEU and chrF with
    sacreBLEU's signatures, or a parser's bracket F1). `search`: beam, alpha, ... (the task's by default)."""
    _check_model(model)
    if len(references) != len(sources) or not sources:
        raise AttnlabError(
            f"the pruning curve needs sources and as many references, got {len(sources)} and {_count(references)}"
        )
    total = len(order)
    rows = []
    for k in steps:
        if not (isinstance(k, int) and 0 <= k < total):  # all heads off leaves nothing to decode with
            raise AttnlabError(f"heads to switch off are counted from 0 to {total - 1}, got {k!r}")
        heads: dict[tuple[str, int], list[int]] = {}
        for kind, layer, head in order[:k]:
            heads.setdefault((kind, layer), []).append(head)
        outputs = [r.text for r in model.translate(list(sources), ablate_heads=heads, **search)]
        row: dict[str, Any] = {"off": k, "share": k / total, "heads": [list(h) for h in order[:k]]}
        if model.task == "parse":
            row["f1"] = parse_report(list(references), outputs, list(sources), "references", "parses")["f1"]
        else:
            row.update(bleu_chrf(outputs, list(references), bleu_tokenize(model.meta.get("data", {}).get("tgt_lang"))))
        rows.append(row)
    return rows
