"""The logit lens (nostalgebraist 2020; TransformerLens's `accumulated_resid` read through the
unembedding): what each decoder layer would output if the stack stopped there.

Every decoder layer of the paper's post-LN stack ends in LayerNorm(x + Sublayer(x)) (§3.1), so
each layer's output lies on the same normalised scale as the top layer's, which the pre-softmax
projection (§3.4: the shared embedding matrix) turns into the next-token distribution. Read
through that same projection, layer l's output says which piece the decoder had settled on by
then: the translation taking shape layer by layer, and at which depth each word is decided. A
pre-norm stack (an option, and some imported models) ends in a final LayerNorm instead, which the
lens applies to every layer's output, as the model does to its top layer's.

The pass is teacher-forced on the trace's own sentence pair, with the heads that were off when it
was recorded switched off again, so the top layer's row is the model's real distribution at each
position (tested against `Model.score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.errors import AttnlabError
from attnlab.model.transformer import Transformer
from attnlab.record.ablation import ablate
from attnlab.record.equation import check_same_model, trace_ids
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace, whole_number

TOP = 5  # the pieces each cell keeps, most probable first
MAX_TOP = 50


@dataclass
class Lens:
    """What each decoder layer would output at each target position of one sentence pair."""

    inputs: list[str]  # the decoder's input at each position: <s>, then the output shifted right
    produced: list[str]  # the piece the model output there (the trace's target, ending in </s>)
    top: list[list[list[str]]]  # [layer][position]: the layer's `k` likeliest pieces, likeliest first
    top_p: np.ndarray  # (layers, positions, k) their probabilities
    p: np.ndarray  # (layers, positions) the probability each layer gives the produced piece
    rank: np.ndarray  # (layers, positions) its rank there: 0 = the layer's first choice

    @property
    def n_layers(self) -> int:
        return len(self.top)

    @property
    def settled(self) -> list[int | None]:
        """For each position, the lowest layer from which the produced piece stays first up to the
        top; None where even the top layer prefers another (beam search looks ahead)."""
        out: list[int | None] = []
        for column in self.rank.T:
            layer = None
            for index in range(len(column) - 1, -1, -1):
                if column[index] != 0:
                    break
                layer = index
            out.append(layer)
        return out


def logit_lens(model: Any, trace: AttentionTrace, top: int = TOP) -> Lens:
    """Read every decoder layer of `model` (what `attnlab.load` returns: a `Transformer` with its
    tokenizers; the model that recorded `trace`) through its pre-softmax projection,
    teacher-forced on the trace's sentence pair."""
    if not (whole_number(top) and 1 <= top <= MAX_TOP):
        raise AttnlabError(f"top (pieces kept per cell) is a whole number from 1 to {MAX_TOP}, got {top!r}")
    net, src, tgt, produced, heads = teacher_forced(model, trace, "the logit lens")
    target, k = torch.tensor(produced)[:, None], min(int(top), net.config.target_vocab)
    read = []
    with torch.no_grad(), ablate(net, heads):
        mask = net.src_mask(src)
        memory = net.encode(src, mask)
        x = net.embed_tokens(tgt, 0, net.target_embedding)
        causal = net.causal_mask(tgt.size(1))
        for layer in net.decoder["layers"]:  # Transformer.decode's loop, reading every layer's output
            x = layer(x, memory, causal, mask)
            read.append(_read(net, x[0], target, k))
    top_p, top_ids, p, rank = (torch.stack(parts).numpy() for parts in zip(*read, strict=True))
    piece = model.target_tokenizer.id_to_piece
    return Lens(
        inputs=list(trace.tgt_input_tokens),
        produced=list(trace.tgt_tokens),
        top=[[[piece(i) for i in cell] for cell in layer] for layer in top_ids.tolist()],
        top_p=top_p,
        p=p,
        rank=rank,
    )


def teacher_forced(
    model: Any, trace: AttentionTrace, what: str
) -> tuple[Transformer, torch.Tensor, torch.Tensor, list[int], dict[tuple[str, int], list[int]]]:
    """(net, source ids (1, Ls), decoder inputs (1, Lt), produced ids, heads that were off) of the
    pair `trace` shows, checked as `what` (the logit lens, direct logit attribution) needs it: the
    model that recorded it, with its tokenizers (a bare Transformer has none to read the trace's
    pieces with), and an output to read."""
    if not (isinstance(getattr(model, "model", None), Transformer) and hasattr(model, "target_tokenizer")):
        raise AttnlabError(f"{what} needs what attnlab.load returns, got {type(model).__name__}")
    check_trace(trace, "the trace")
    net = model.model
    src_ids, produced = trace_ids(model, trace)
    check_same_model(net, trace, "this one's layers would be read on an output it did not produce")
    if not produced:
        raise AttnlabError("the trace has no target pieces: there is nothing the decoder output to read")
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]])
    return net, src, tgt, produced, trace.heads_off


def _read(net: Transformer, hidden: torch.Tensor, target: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """One layer's (positions, d_model) output through the pre-softmax projection (after a pre-norm
    stack's final LayerNorm): its `k` likeliest pieces with their probabilities, and the produced
    pieces' (`target`, (positions, 1)) probability and rank. One layer at a time: a long output's
    probabilities for every layer at once would be 0.9 GB in float32 (6 layers × 1,024 positions ×
    37,000 pieces), in a server that answers many visitors."""
    if net.final_norms:
        hidden = net.final_norms[1](hidden)
    probs = torch.softmax(net.logits(hidden).float(), -1)  # (positions, vocabulary)
    top_p, top_ids = probs.topk(k, dim=-1)
    p = probs.gather(-1, target)
    return top_p, top_ids, p.squeeze(-1), (probs > p).sum(-1)  # rank: the pieces it finds likelier
