"""Greedy and beam search as §6.1 uses them, with an incremental key/value cache.

Beam search follows GNMT/fairseq: the score of a finished hypothesis is log P(Y|X) / lp(Y) with
lp(Y) = ((5 + |Y|) / 6)^α (|Y| counts </s>); the paper's defaults are beam 4, α 0.6, maximum
output length = input length + 50 (parsing, §6.3: beam 21, α 0.3, input + 300). A sentence
stops as soon as `beam` hypotheses have finished (fairseq) or no live one can beat the best
finished one any more (tensor2tensor), and leaves the batch, so the remaining ones decode
faster; the best hypothesis is the same either way, the n-best list may be shorter. The search
only talks to a `Stepper` (start / step / reorder), which lets tests drive it with a scripted
toy decoder of known probabilities.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from attnlab.errors import ConfigError, ModelInputError, TimeLimitError
from attnlab.model.cache import KVCache
from attnlab.model.kernels import top_k
from attnlab.model.transformer import Transformer
from attnlab.record.trace import whole_number


@dataclass
class Hypothesis:
    tokens: list[int]  # produced ids, ending in </s> (unless cut at the length limit)
    logprob: float  # log P(Y | X) as the search saw it (a parser's tree constraint: a leaf is any word piece)
    score: float  # logprob / lp(Y), what the beam ranks by
    step_logprobs: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al., 2016): ((5 + |Y|) / 6)^α."""
    return ((5.0 + length) / 6.0) ** alpha


def scored(tokens: list[int], steps: list[float], alpha: float) -> Hypothesis:
    """A hypothesis from its tokens' log-probabilities, scored as the beam ranks them."""
    return Hypothesis(tokens, sum(steps), sum(steps) / length_penalty(len(tokens), alpha), steps)


class Stepper(Protocol):
    def start(self, rows: Tensor) -> None:
        """Begin decoding; `rows[i]` is the sentence index of decoder row i."""

    def step(self, tokens: Tensor) -> Tensor:
        """tokens (N, t) produced so far (BOS first) -> log-probabilities (N, V) of the next."""

    def reorder(self, index: Tensor) -> None:
        """Row i continues old row index[i] (beams reordered, finished sentences dropped)."""


# (monotonic time at which decoding stops, the limit in seconds), per thread and asyncio task
DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("attnlab_decode_deadline", default=None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Decoding in this block (in this thread or task only) stops with a one-line
    `TimeLimitError` once it has run for `seconds` (None or 0: no limit). A served explorer
    decodes one request at a time, so one 1,000-piece input at beam 32 (minutes) would hold up
    every other session; the limit is checked before each decoding step."""
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"the time limit must be a number of seconds ≥ 0 (0: none), got {seconds!r}")
    token = DEADLINE.set((time.monotonic() + seconds, seconds) if seconds else None)
    try:
        yield
    finally:
        DEADLINE.reset(token)


def check_time() -> None:
    """Raise `TimeLimitError` if the `time_limit` around this call has run out."""
    deadline = DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise TimeLimitError(
            f"decoding stopped after {deadline[1]:g} s, its time limit: try a shorter text or a smaller beam"
        )


class TransformerStepper:
    """Steps a Transformer; with `cache`, only the newest position is computed each step.

    The encoder output (and, in the cache, the encoder-decoder K/V) is kept once per sentence
    while a sentence's rows are consecutive and equally many per sentence, which is how
    `beam_search` and `greedy_search` lay them out; any other layout falls back to one copy per
    row. Beams then cost no copies of the source side, only of their own prefixes.
    """

    def __init__(self, model: Transformer, src: Tensor, cache: bool = True, mask_tokens: Sequence[int] = ()) -> None:
        self.model, self.use_cache = model, cache
        masked = sorted({model.config.pad_id, model.config.bos_id, *mask_tokens})
        self.mask_tokens = torch.tensor(masked, device=src.device)
        self.src_mask = model.src_mask(src)
        self.encoded = model.encode(src, self.src_mask)  # (B, Ls, d_model), once per source

    def start(self, rows: Tensor) -> None:
        self.memory, self.mask = self.encoded, self.src_mask
        self.row_memory = torch.arange(self.encoded.size(0))  # memory entry each row reads
        self.cache = KVCache() if self.use_cache else None
        self.buffer: Tensor | None = None  # fp32 log-probabilities of a bf16 model
        self.reorder(rows)

    def step(self, tokens: Tensor) -> Tensor:
        check_time()
        new = tokens[:, -1:] if self.cache is not None else tokens
        hidden = self.model.decode(new, self.memory, self.mask, self.cache)[:, -1]  # (N, d_model)
        lprobs = self._log_softmax(hidden)
        lprobs.index_fill_(1, self.mask_tokens, float("-inf"))  # never produce pad or a second <s>
        return lprobs

    def _log_softmax(self, hidden: Tensor) -> Tensor:
        """fp32 log-probabilities over the vocabulary, normalised in place: one (N, V) tensor
        read and written, not two (1,200 rows × 8,000: 2 ms instead of 6.7 ms, the same numbers).
        In other dtypes the logits are copied into an fp32 buffer kept across steps: freshly
        allocated, an (N, V) fp32 tensor costs more in page faults than in arithmetic."""
        logits = self.model.logits(hidden)
        if logits.dtype == torch.float32:
            lprobs = logits
        else:
            if self.buffer is None or self.buffer.size(0) < logits.size(0):
                self.buffer = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
            lprobs = self.buffer[: logits.size(0)]
            lprobs.copy_(logits)  # (log_softmax's own dtype= is ~9x slower on the CPU)
        return torch.log_softmax(lprobs, dim=-1, out=lprobs)

    def reorder(self, index: Tensor) -> None:
        wanted = self.row_memory.index_select(0, index)  # the memory entry of each new row
        groups = wanted.numel() // torch.unique_consecutive(wanted).numel()
        if not torch.equal(wanted, wanted[::groups].repeat_interleave(groups)):
            groups = 1  # not consecutive equal blocks: one copy per row
        keep = wanted[::groups]  # the memory entries that stay, in their new order
        if not torch.equal(keep, torch.arange(self.memory.size(0))):
            self.memory = self.memory.index_select(0, keep.to(self.memory.device))
            self.mask = None if self.mask is None else self.mask.index_select(0, keep.to(self.mask.device))
        self.row_memory = torch.arange(keep.numel()).repeat_interleave(groups)
        if self.cache is not None:
            self.cache.reorder(index, keep)


def top_moves(lprobs: Tensor, k: int, chunk: int = 64) -> tuple[Tensor, Tensor]:
    """`lprobs.topk(k, dim=1)` over a large vocabulary, in a quarter of its time on the CPU.

    A row's k best entries lie in the k chunks (of `chunk` columns) with the highest maxima:
    each chunk holding one of them has a maximum at least the k-th best value, and at most k
    chunks can. So one cheap max over every column, then `topk` over k · chunk candidates
    instead of V (8,000 columns: 7.7 ms -> 3.4 ms a step for 1,000 rows). Same values; among
    exact ties the indices may differ, as they may between `topk` implementations. Where the
    compiled kernel applies (fp32 on the CPU), one pass per row instead (`kernels.top_k`:
    400 rows, one thread, 1.7 ms against 2.6 ms for the chunks).
    """
    found = top_k(lprobs, k)  # the compiled one-pass kernel, where it applies
    if found is not None:
        return found
    rows, vocab = lprobs.shape
    if vocab < 4 * k * chunk:  # too few chunks to skip: plain topk
        return lprobs.topk(min(k, vocab), dim=1)
    whole = vocab // chunk * chunk
    best_chunks = lprobs[:, :whole].reshape(rows, -1, chunk).amax(2).topk(k, dim=1).indices  # (N, k)
    columns = (best_chunks[:, :, None] * chunk + torch.arange(chunk, device=lprobs.device)).view(rows, -1)
    if whole < vocab:  # the ragged last chunk is always a candidate
        columns = torch.cat([columns, torch.arange(whole, vocab, device=lprobs.device).expand(rows, -1)], 1)
    values, picked = lprobs.gather(1, columns).topk(k, dim=1)
    return values, columns.gather(1, picked)


def _settled(finished: list[Hypothesis], best_live: float, max_len: int, alpha: float) -> bool:
    """Whether no live hypothesis can still beat the best finished one (tensor2tensor's early
    stop): log-probabilities only fall, so a prefix with log-probability L ends with a score of
    at most L / lp(max_len). Without it a sentence whose winner is long settled keeps the batch
    busy until `beam` hopeless hypotheses have run to the length limit (parsing: input + 300)."""
    return bool(finished) and max(h.score for h in finished) >= best_live / length_penalty(max_len, alpha)


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
    """Best-first finished hypotheses per sentence (at most `n_best`, default `beam`).

    Rows are laid out sentence by sentence, `width` rows each: one at the first step (all beams
    would start identical), `beam` after it.
    """
    batch = len(max_lens)
    n_best = n_best or beam
    active = list(range(batch))  # the sentence of each block of `width` rows
    width = 1
    stepper.start(torch.arange(batch))
    tokens = torch.full((batch, 1), bos, dtype=torch.long)
    token_lps = torch.zeros(batch, 0)  # per row: the log-probability of each token so far
    scores = torch.zeros(batch, 1)  # per sentence and row: log P(prefix)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    t = 0
    while active:
        t += 1
        lprobs = stepper.step(tokens).cpu()  # (N, V)
        for i, sent in enumerate(active):
            if t >= max_lens[sent]:  # out of room: the only move left is </s>
                rows = lprobs[i * width : (i + 1) * width]
                end = rows[:, eos].clamp(min=-1e4)  # finite: always an answer
                rows.fill_(float("-inf"))
                rows[:, eos] = end
        # A sentence's best 2·beam moves are among the best 2·beam moves of each of its rows:
        # rank those, not all width × V of them.
        k = min(2 * beam, lprobs.size(1))
        row_lps, row_tokens = top_moves(lprobs, k)  # (N, k)
        candidates = (scores[:, :, None] + row_lps.view(len(active), width, k)).view(len(active), width * k)
        top_scores, top = candidates.topk(min(2 * beam, width * k), dim=1)  # (A, M), best first
        top_tokens = row_tokens.view(len(active), width * k).gather(1, top)
        top_lps = row_lps.view(len(active), width * k).gather(1, top)
        top_rows = top // k + torch.arange(len(active))[:, None] * width  # the row each move extends
        live = top_scores > float("-inf")
        ends = live & top_tokens.eq(eos)
        ends[:, beam:] = False  # as fairseq: </s> counts only among the top `beam` moves
        if ends.any():
            where = ends.nonzero()  # (E, 2): sentence, rank
            rows = top_rows[where[:, 0], where[:, 1]]
            for (i, _), prefix, steps, score, lp in zip(
                where.tolist(),
                tokens.index_select(0, rows)[:, 1:].tolist(),
                token_lps.index_select(0, rows).tolist(),
                top_scores[where[:, 0], where[:, 1]].tolist(),
                top_lps[where[:, 0], where[:, 1]].tolist(),
                strict=True,
            ):
                hypothesis = Hypothesis([*prefix, eos], score, score / length_penalty(t, alpha), [*steps, lp])
                finished[active[i]].append(hypothesis)
        # Each sentence goes on with its best `beam` moves that do not end it; with fewer, the
        # first one is repeated as dead copies (score -inf) to keep `beam` rows.
        goes = live & ~top_tokens.eq(eos)
        goes &= goes.cumsum(1) <= beam
        ranks = torch.arange(top.size(1))
        pick = torch.where(goes, ranks, ranks + top.size(1)).argsort(1)[:, :beam]  # those first, in order
        alive = goes.gather(1, pick)
        pick = torch.where(alive, pick, pick[:, :1])
        best_live = top_scores.gather(1, pick[:, :1]).squeeze(1).tolist()
        stay = [
            i
            for i, (sent, n, live) in enumerate(zip(active, goes.sum(1).tolist(), best_live, strict=True))
            if n and len(finished[sent]) < beam and not _settled(finished[sent], live, max_lens[sent], alpha)
        ]
        if not stay:
            break
        if len(stay) < len(active):  # some sentences are done: keep the others' rows
            stay_index = torch.tensor(stay)
            pick, alive, top_rows, top_tokens, top_lps, top_scores = (
                t.index_select(0, stay_index) for t in (pick, alive, top_rows, top_tokens, top_lps, top_scores)
            )
        index = top_rows.gather(1, pick).view(-1)
        stepper.reorder(index)
        chosen = top_tokens.gather(1, pick).view(-1, 1)
        chosen_lps = top_lps.gather(1, pick).view(-1, 1)
        tokens = torch.cat([tokens.index_select(0, index), chosen], dim=1)
        token_lps = torch.cat([token_lps.index_select(0, index), chosen_lps], dim=1)
        scores = top_scores.gather(1, pick).masked_fill(~alive, float("-inf"))
        active, width = [active[i] for i in stay], beam
    return [sorted(found, key=lambda h: -h.score)[:n_best] for found in finished]


@torch.no_grad()
def greedy_search(
    stepper: Stepper, max_lens: Sequence[int], bos: int = 2, eos: int = 3, alpha: float = 0.0
) -> list[Hypothesis]:
    """Take the most likely token each step; finished sentences leave the batch. `alpha` only
    scores the result as the beam would (log P / lp(Y)), so scores mean one thing at any beam."""
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
                results[sent] = scored([*tokens[i, 1:].tolist(), eos], steps[sent], alpha)
            else:
                keep.append(i)
        if not keep:
            break
        index = torch.tensor(keep)
        stepper.reorder(index)
        tokens = torch.cat([tokens.index_select(0, index), best.index_select(0, index)[:, None]], dim=1)
        active = [active[i] for i in keep]
    return [r for r in results if r is not None]


def _finite(value: object) -> bool:
    """A finite real number of any kind (NumPy's, a Fraction), not a bool or a numeric string."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_alpha(alpha: object) -> None:
    """α, the length penalty's exponent: finite and ≥ 0 (a negative α rewards short outputs,
    where the early stop's bound of `_settled` no longer holds)."""
    if not _finite(alpha) or alpha < 0:  # type: ignore[operator]
        raise ConfigError(f"alpha (the length penalty's exponent) must be a finite number ≥ 0, got {alpha!r}")


def check_settings(beam: int, alpha: float, max_len_a: float, max_len_b: int, n_best: int | None) -> None:
    """One-line errors for search settings that would decode something other than asked (or
    fail deep inside with a TypeError): a beam below 1 or a fraction, a bad α (`check_alpha`),
    and a length limit that leaves no room (max_len_b = -100 silently produced empty
    translations). NumPy's numbers count as numbers."""
    if not whole_number(beam) or beam < 1:
        raise ConfigError(f"beam must be a whole number ≥ 1 (1: greedy), got {beam!r}")
    check_alpha(alpha)
    if not (_finite(max_len_a) and _finite(max_len_b)) or max_len_a < 0 or max_len_b < 0 or max_len_a == max_len_b == 0:
        raise ConfigError(
            f"the output may be max_len_a × input + max_len_b long: both must be numbers ≥ 0 and not both 0, "
            f"got {max_len_a!r} and {max_len_b!r}"
        )
    if n_best is not None and (not whole_number(n_best) or n_best < 1):
        raise ConfigError(f"n_best must be a whole number ≥ 1, got {n_best!r}")


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
    """Decode a padded batch of sources (B, Ls); beam 1 is greedy. Max output length per
    sentence = a · (input tokens) + b, capped by the model's max_len. `constrain(stepper,
    max_lens)` may wrap the stepper to forbid moves (e.g. `constrain.TreeConstraint`)."""
    check_settings(beam, alpha, max_len_a, max_len_b, n_best)
    beam, alpha, max_len_a = int(beam), float(alpha), float(max_len_a)  # NumPy's numbers as Python's
    n_best = None if n_best is None else int(n_best)
    model.check_ids(src, "source")  # before reading lengths off it: a 1-D or empty tensor is one line
    if beam > model.config.target_vocab // 2:  # each row keeps its 2·beam best moves of the vocabulary
        raise ConfigError(f"beam {beam} is more than half the {model.config.target_vocab}-piece vocabulary")
    src_lens = src.ne(model.config.pad_id).sum(1).tolist()
    if 0 in src_lens:
        raise ModelInputError(f"source row {src_lens.index(0)} is all padding: nothing to translate")
    was_training = model.training  # a caller validating inside a training loop keeps its dropout
    switch = any(module.training for module in model.modules())  # (eval() walks every module: 1.7 ms)
    if switch:
        model.eval()
    try:
        return _generate(model, src, src_lens, beam, alpha, max_len_a, max_len_b, cache, n_best, constrain)
    finally:
        if switch:
            model.train(was_training)


def _generate(
    model: Transformer,
    src: Tensor,
    src_lens: list[int],
    beam: int,
    alpha: float,
    max_len_a: float,
    max_len_b: int,
    cache: bool,
    n_best: int | None,
    constrain: Callable[[Stepper, list[int]], Stepper] | None,
) -> list[list[Hypothesis]]:
    limit = model.config.max_len - 1
    max_lens = [min(limit, int(max_len_a * (n - 1) + max_len_b)) for n in src_lens]
    if min(max_lens) < 2:  # (max_lens count the </s>) only </s> would fit: an empty output, not an answer
        pieces = src_lens[max_lens.index(min(max_lens))] - 1
        raise ConfigError(
            f"the length limit max_len_a × input + max_len_b = {max_len_a:g} × {pieces} + {max_len_b:g} leaves "
            "no room for one token before </s>: raise max_len_a or max_len_b"
        )
    stepper: Stepper = TransformerStepper(model, src, cache=cache)
    if constrain is not None:
        stepper = constrain(stepper, max_lens)
    eos, bos = model.config.eos_id, model.config.bos_id
    if beam <= 1:
        return [[h] for h in greedy_search(stepper, max_lens, bos, eos, alpha)]
    return beam_search(stepper, max_lens, beam, alpha, bos, eos, n_best)
