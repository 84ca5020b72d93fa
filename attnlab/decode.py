"""Greedy and beam search as §6.1 uses them, with an incremental key/value cache.

Beam search follows GNMT/fairseq: the score of a finished hypothesis is log P(Y|X) / lp(Y) with
lp(Y) = ((5 + |Y|) / 6)^α (|Y| counts </s>); the paper's defaults are beam 4, α 0.6, maximum
output length = input length + 50 (parsing, §6.3: beam 21, α 0.3, input + 300). A sentence
stops as soon as `beam` hypotheses have finished, and leaves the batch, so the remaining ones
decode faster. The search only talks to a `Stepper` (start / step / reorder), which lets tests
drive it with a scripted toy decoder of known probabilities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from attnlab.model import KVCache, Transformer


@dataclass
class Hypothesis:
    tokens: list[int]  # produced ids, ending in </s> (unless cut at the length limit)
    logprob: float  # log P(Y | X)
    score: float  # logprob / lp(Y), what the beam ranks by
    step_logprobs: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al., 2016): ((5 + |Y|) / 6)^α."""
    return ((5.0 + length) / 6.0) ** alpha


class Stepper(Protocol):
    def start(self, rows: Tensor) -> None:
        """Begin decoding; `rows[i]` is the sentence index of decoder row i."""

    def step(self, tokens: Tensor) -> Tensor:
        """tokens (N, t) produced so far (BOS first) -> log-probabilities (N, V) of the next."""

    def reorder(self, index: Tensor) -> None:
        """Row i continues old row index[i] (beams reordered, finished sentences dropped)."""


class TransformerStepper:
    """Steps a Transformer; with `cache`, only the newest position is computed each step."""

    def __init__(self, model: Transformer, src: Tensor, cache: bool = True, mask_tokens: Sequence[int] = ()) -> None:
        self.model, self.src, self.use_cache = model, src, cache
        self.mask_tokens = list({model.config.pad_id, model.config.bos_id, *mask_tokens})
        self.src_mask = model.src_mask(src)
        self.memory = model.encode(src, self.src_mask)  # (B, Ls, d_model), once per source

    def start(self, rows: Tensor) -> None:
        self.memory = self.memory.index_select(0, rows)
        self.mask = None if self.src_mask is None else self.src_mask.index_select(0, rows)
        self.cache = KVCache() if self.use_cache else None

    def step(self, tokens: Tensor) -> Tensor:
        new = tokens[:, -1:] if self.cache is not None else tokens
        hidden = self.model.decode(new, self.memory, self.mask, self.cache)[:, -1]  # (N, d_model)
        lprobs = torch.log_softmax(self.model.logits(hidden).float(), dim=-1)
        lprobs[:, self.mask_tokens] = float("-inf")  # never produce pad or a second <s>
        return lprobs

    def reorder(self, index: Tensor) -> None:
        self.memory = self.memory.index_select(0, index)
        if self.mask is not None:
            self.mask = self.mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


@torch.no_grad()
def beam_search(
    stepper: Stepper,
    max_lens: Sequence[int],
    beam: int = 4,
    alpha: float = 0.6,
    bos: int = 2,
    eos: int = 3,
    n_best: int | None = None,
) -> list[list[Hypothesis]]:
    """Best-first finished hypotheses per sentence (at most `n_best`, default `beam`)."""
    batch = len(max_lens)
    n_best = n_best or beam
    active = list(range(batch))  # sentence of each block of `beam` rows
    rows = torch.arange(batch).repeat_interleave(beam)
    stepper.start(rows)
    tokens = torch.full((batch * beam, 1), bos, dtype=torch.long)
    scores = torch.full((batch, beam), float("-inf"))
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    history: list[list[list[float]]] = [[[] for _ in range(beam)] for _ in range(batch)]
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    t = 0
    while active:
        t += 1
        lprobs = stepper.step(tokens).cpu()  # (N, V)
        vocab = lprobs.size(-1)
        for i, sent in enumerate(active):
            if t >= max_lens[sent]:  # out of room: the only move left is </s>
                forced = torch.full((beam, vocab), float("-inf"))
                forced[:, eos] = lprobs[i * beam : (i + 1) * beam, eos].clamp(min=-1e4)  # finite: always an answer
                lprobs[i * beam : (i + 1) * beam] = forced
        candidates = (scores[: len(active), :, None] + lprobs.view(len(active), beam, vocab)).view(len(active), -1)
        top_scores, top_ids = candidates.topk(min(2 * beam, candidates.size(1)), dim=1)
        keep_rows, keep_tokens, keep_scores, still_active, new_history = [], [], [], [], []
        for i, sent in enumerate(active):
            chosen: list[tuple[int, int, float, list[float]]] = []
            for rank, (score, flat) in enumerate(zip(top_scores[i].tolist(), top_ids[i].tolist(), strict=True)):
                if score == float("-inf"):
                    break
                source_beam, token = divmod(flat, vocab)
                row = i * beam + source_beam
                steps = [*history[i][source_beam], lprobs[row, token].item()]
                if token == eos:
                    if rank < beam:  # as fairseq: </s> counts only among the top `beam` moves
                        produced = [*tokens[row, 1:].tolist(), eos]
                        finished[sent].append(Hypothesis(produced, score, score / length_penalty(t, alpha), steps))
                elif len(chosen) < beam:
                    chosen.append((row, token, score, steps))
                if len(chosen) == beam and rank >= beam - 1:
                    break
            if len(finished[sent]) >= beam or not chosen:
                continue
            while len(chosen) < beam:  # fewer live candidates than beams: pad with dead copies
                chosen.append((chosen[0][0], chosen[0][1], float("-inf"), chosen[0][3]))
            still_active.append(sent)
            for row, token, score, steps in chosen:
                keep_rows.append(row)
                keep_tokens.append(token)
                keep_scores.append(score)
                new_history.append(steps)
        if not still_active:
            break
        index = torch.tensor(keep_rows)
        stepper.reorder(index)
        tokens = torch.cat([tokens.index_select(0, index), torch.tensor(keep_tokens)[:, None]], dim=1)
        scores = torch.tensor(keep_scores).view(len(still_active), beam)
        history = [new_history[k * beam : (k + 1) * beam] for k in range(len(still_active))]
        active = still_active
    return [sorted(found, key=lambda h: -h.score)[:n_best] for found in finished]


@torch.no_grad()
def greedy_search(stepper: Stepper, max_lens: Sequence[int], bos: int = 2, eos: int = 3) -> list[Hypothesis]:
    """Take the most likely token each step; finished sentences leave the batch."""
    batch = len(max_lens)
    stepper.start(torch.arange(batch))
    tokens = torch.full((batch, 1), bos, dtype=torch.long)
    active = list(range(batch))
    steps: list[list[float]] = [[] for _ in range(batch)]
    results: list[Hypothesis | None] = [None] * batch
    t = 0
    while active:
        t += 1
        lprobs = stepper.step(tokens).cpu()
        best = lprobs.argmax(-1)
        keep = []
        for i, sent in enumerate(active):
            token = eos if t >= max_lens[sent] else int(best[i])
            steps[sent].append(float(lprobs[i, token]))
            if token == eos:
                produced = [*tokens[i, 1:].tolist(), eos]
                logprob = sum(steps[sent])
                results[sent] = Hypothesis(produced, logprob, logprob, steps[sent])
            else:
                keep.append(i)
        if not keep:
            break
        index = torch.tensor(keep)
        stepper.reorder(index)
        tokens = torch.cat([tokens.index_select(0, index), best.index_select(0, index)[:, None]], dim=1)
        active = [active[i] for i in keep]
    return [r for r in results if r is not None]


def generate(
    model: Transformer,
    src: Tensor,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    cache: bool = True,
    n_best: int | None = None,
    constrain: Callable[[Stepper, list[int]], Stepper] | None = None,
) -> list[list[Hypothesis]]:
    """Decode a padded batch of sources (B, Ls); beam ≤ 1 is greedy. Max output length per
    sentence = a · (input tokens) + b, capped by the model's max_len. `constrain(stepper,
    max_lens)` may wrap the stepper to forbid moves (e.g. `constrain.TreeConstraint`)."""
    model.eval()
    src_lens = src.ne(model.config.pad_id).sum(1).tolist()
    limit = model.config.max_len - 1
    max_lens = [max(1, min(limit, int(max_len_a * (n - 1) + max_len_b))) for n in src_lens]
    stepper: Stepper = TransformerStepper(model, src, cache=cache)
    if constrain is not None:
        stepper = constrain(stepper, max_lens)
    eos, bos = model.config.eos_id, model.config.bos_id
    if beam <= 1:
        return [[h] for h in greedy_search(stepper, max_lens, bos, eos)]
    return beam_search(stepper, max_lens, beam, alpha, bos, eos, n_best)
