"""What switching heads off does to one sentence: re-decode it with the heads off, and score the
original output token by token with and without them (the explorer's and the notebooks'
ablation views).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.decode.api import Model
from attnlab.errors import AttnlabError
from attnlab.record import ablate
from attnlab.record.equation import check_same_model, trace_ids
from attnlab.record.stats import check_trace
from attnlab.record.trace import AttentionTrace


@dataclass
class Ablation:
    """What switching heads off does to one sentence."""

    heads: dict[tuple[str, int], list[int]]
    text: str  # the re-decoded output with the heads off
    tokens: list[str]
    original_tokens: list[str]
    before: list[float] = field(default_factory=list)  # log P of each original token, all heads
    after: list[float] = field(default_factory=list)  # the same with the heads off

    @property
    def logprob_change(self) -> float:
        return sum(self.after) - sum(self.before)


def token_logprobs(model: Any, src_ids: list[int], produced: list[int], heads: dict | None = None) -> list[float]:
    """Teacher-forced log P(y_t | y_<t, x) of each produced token, optionally with heads off."""
    net = model.model
    src = torch.tensor([src_ids])
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]])
    with torch.no_grad(), ablate(net, heads or {}):
        lprobs = torch.log_softmax(net(src, tgt).float(), -1)[0]
    return lprobs.gather(-1, torch.tensor(produced)[:, None]).squeeze(-1).tolist()


def ablation(model: Any, trace: AttentionTrace, heads: dict[tuple[str, int], list[int]], **decode: Any) -> Ablation:
    """Re-decode the trace's source with `heads` switched off, and score the original output.
    `decode` takes search settings (beam, alpha, ...): the rest is this function's to set."""
    if not isinstance(model, Model):  # None was an AttributeError from deep inside
        raise AttnlabError(f"expected a model from attnlab.load(...), got {type(model).__name__}")
    check_trace(trace, "the trace")
    if taken := sorted(set(decode) & {"record", "truncate", "ablate_heads"}):  # "multiple values for keyword"
        raise AttnlabError(f"ablation sets {', '.join(taken)} itself; pass search settings only (beam, alpha, ...)")
    src_ids, produced = trace_ids(model, trace)
    check_same_model(model.model, trace, "switching its heads off in this one would not say what they did there")
    text = trace.meta.get("text")
    if not isinstance(text, str) or model.encode_source(text, True)[0] != src_ids:  # (meta is free to edit)
        text = model.tokenizer.decode(src_ids[:-1])  # the trace's own source, not another sentence
    result = model.translate(text, record=False, truncate=True, ablate_heads=heads, **decode)
    return Ablation(
        heads=heads,
        text=result.text,
        tokens=result.tokens,
        original_tokens=list(trace.tgt_tokens),
        before=token_logprobs(model, src_ids, produced),
        after=token_logprobs(model, src_ids, produced, heads),
    )
