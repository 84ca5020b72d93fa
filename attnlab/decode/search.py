"""Greedy and beam search as §6.1 uses them, with an incremental key/value cache.

Beam search follows GNMT/fairseq: the score of a finished hypothesis is log P(Y|X) / lp(Y) with
lp(Y) = ((5 + |Y|) / 6)^α (|Y| counts </s>); the paper's defaults are beam 4, α 0.6, maximum
output length = input length + 50 (parsing, §6.3: beam 21, α 0.3, input + 300). As in
tensor2tensor, which the paper decoded with ("terminate early when possible"), any of a
sentence's 2·beam best moves may end a hypothesis, and a sentence stops only once no live
hypothesis can beat the best finished one any more, then leaves the batch, so the remaining ones
decode faster. fairseq's rule, stopping once `beam` hypotheses have ended, missed longer ones
that scored higher with α > 0: on test2016 with the bundled translator it chose another output
for 12 of 1,000 sentences (BLEU 38.45 → 38.54 with this rule, 3.9 → 4.1 s). `patience` p
brings that search back as an option for speed, as CTranslate2's `patience` (Kasai et al., 2022)
runs it: only the `beam` best moves may end a hypothesis, and a sentence also stops once
round(p · beam) hypotheses have ended (p = 1: fairseq's and CTranslate2's default; counting ends
among all 2·beam moves instead stopped on low-ranked ones: BLEU 37.65). The search
only talks to a `Stepper` (start / step / reorder), which lets tests drive it with a scripted
toy decoder of known probabilities; `attnlab.decode.stepper` steps a Transformer.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from attnlab.decode.stepper import TransformerStepper, ranked_moves
from attnlab.errors import ConfigError, ModelInputError
from attnlab.model.transformer import Transformer
from attnlab.record.trace import check_flag, whole_number


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
    """What the search drives. A stepper may also offer `ranked(tokens, k, eos)`: what the
    search reads of a step (`moves`), computed its own, faster way."""

    def start(self, rows: Tensor) -> None:
        """Begin decoding; `rows[i]` is the sentence index of decoder row i."""

    def step(self, tokens: Tensor) -> Tensor:
        """tokens (N, t) produced so far (BOS first) -> log-probabilities (N, V) of the next."""

    def reorder(self, index: Tensor) -> None:
        """Row i continues old row index[i] (beams reordered, finished sentences dropped)."""


def moves(stepper: Stepper, tokens: Tensor, k: int, eos: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's k best moves (log-probabilities and tokens, (N, k), best first) and its
    log-probability of </s> (N,): the stepper's own `ranked` where it has one (one pass over
    the logits, `TransformerStepper`), else read off `step`'s log-probabilities."""
    ranked = getattr(stepper, "ranked", None)
    return ranked(tokens, k, eos) if ranked is not None else ranked_moves(stepper.step(tokens).cpu(), k, eos)


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
    patience: float | None = None,
) -> list[list[Hypothesis]]:
    """Best-first finished hypotheses per sentence (at most `n_best`, default `beam`); with
    `patience`, fairseq's search (module docstring).

    Rows are laid out sentence by sentence, `width` rows each: one at the first step (all beams
    would start identical), `beam` after it.
    """
    batch = len(max_lens)
    n_best = n_best or beam
    enough = math.inf if patience is None else max(1, math.floor(patience * beam + 0.5))  # ends that stop a sentence
    enders = 2 * beam if patience is None else beam  # how many of the best moves may end a hypothesis
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
        # A sentence's best 2·beam moves are among the best 2·beam moves of each of its rows:
        # rank those, not all width × V of them.
        row_lps, row_tokens, end_lps = moves(stepper, tokens, 2 * beam, eos)  # (N, k), (N, k), (N,)
        k = row_lps.size(1)  # 2·beam, or V where smaller
        for i, sent in enumerate(active):
            if t >= max_lens[sent]:  # out of room: the only move left is </s>
                rows = slice(i * width, (i + 1) * width)
                row_lps[rows] = float("-inf")
                row_lps[rows, 0] = end_lps[rows].clamp(min=-1e4)  # finite: always an answer
                row_tokens[rows, 0] = eos
        candidates = (scores[:, :, None] + row_lps.view(len(active), width, k)).view(len(active), width * k)
        top_scores, top = candidates.topk(min(2 * beam, width * k), dim=1)  # (A, M), best first
        top_tokens = row_tokens.view(len(active), width * k).gather(1, top)
        top_lps = row_lps.view(len(active), width * k).gather(1, top)
        top_rows = top // k + torch.arange(len(active))[:, None] * width  # the row each move extends
        live = top_scores > float("-inf")
        ranks = torch.arange(top.size(1))
        ends = live & top_tokens.eq(eos) & (ranks < enders)  # (a lower move ending may still win once normalised)
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
        pick = torch.where(goes, ranks, ranks + top.size(1)).argsort(1)[:, :beam]  # those first, in order
        alive = goes.gather(1, pick)
        pick = torch.where(alive, pick, pick[:, :1])
        best_live = top_scores.gather(1, pick[:, :1]).squeeze(1).tolist()
        stay = [
            i
            for i, (sent, n, live) in enumerate(zip(active, goes.sum(1).tolist(), best_live, strict=True))
            if n and len(finished[sent]) < enough and not _settled(finished[sent], live, max_lens[sent], alpha)
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
        lps, best, end_lps = moves(stepper, tokens, 1, eos)  # (N, 1), (N, 1), (N,)
        best = best[:, 0]
        keep = []
        for i, sent in enumerate(active):
            token = eos if t >= max_lens[sent] else int(best[i])
            steps[sent].append(float(end_lps[i] if token == eos else lps[i, 0]))
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


MAX_PATIENCE = 1000.0  # past it the count is never reached: leave patience out for tensor2tensor's stop alone
MAX_ALPHA = 10.0  # GNMT tuned α in [0, 1]; past ~70 the penalty of a long output overflows a float


def check_alpha(alpha: object) -> None:
    """α, the length penalty's exponent: from 0 (a negative α rewards short outputs, where the
    early stop's bound of `_settled` no longer holds) to `MAX_ALPHA` (α 400 was an OverflowError)."""
    if not _finite(alpha) or not 0 <= alpha <= MAX_ALPHA:  # type: ignore[operator]
        raise ConfigError(
            f"alpha (the length penalty's exponent) must be a number from 0 to {MAX_ALPHA:g} (the paper: 0.6), "
            f"got {alpha!r}"
        )


def check_settings(
    beam: int,
    alpha: float,
    max_len_a: float,
    max_len_b: int,
    n_best: int | None,
    vocab: int | None = None,
    patience: float | None = None,
) -> None:
    """One-line errors for search settings that would decode something other than asked (or
    fail deep inside with a TypeError): a beam below 1 or a fraction, or over half a `vocab`-piece
    vocabulary (each row keeps its 2·beam best moves of it), a bad α (`check_alpha`), and a length
    limit that leaves no room (max_len_b = -100 silently produced empty translations), a
    patience that is not a number > 0. NumPy's numbers count as numbers."""
    if not whole_number(beam) or beam < 1:
        raise ConfigError(f"beam must be a whole number ≥ 1 (1: greedy), got {beam!r}")
    if vocab is not None and beam > vocab // 2:
        raise ConfigError(f"beam {beam} is more than half the {vocab}-piece vocabulary")
    check_alpha(alpha)
    if not (_finite(max_len_a) and _finite(max_len_b)) or max_len_a < 0 or max_len_b < 0 or max_len_a == max_len_b == 0:
        raise ConfigError(
            f"the output may be max_len_a × input + max_len_b long: both must be numbers ≥ 0 and not both 0, "
            f"got {max_len_a!r} and {max_len_b!r}"
        )
    if patience is not None and not (_finite(patience) and 0 < patience <= MAX_PATIENCE):  # type: ignore[operator]
        raise ConfigError(
            f"patience must be a number > 0 and ≤ {MAX_PATIENCE:g} (1: stop once `beam` hypotheses have ended), "
            f"got {patience!r}"
        )
    if n_best is not None and (not whole_number(n_best) or n_best < 1):
        raise ConfigError(f"n_best must be a whole number ≥ 1, got {n_best!r}")
    if n_best is not None and n_best > beam:  # (it returned whatever the beam had finished: often fewer)
        raise ConfigError(
            f"n_best {n_best} > beam {beam}: a beam of {beam} keeps at most {beam} translations; raise beam"
        )


def check_flags(**flags: object) -> None:
    """Each flag is True or False (NumPy's bools too): `record="no"` is a true string, and
    recorded; `truncate="no"` cut an over-long input without a word."""
    for name, value in flags.items():
        check_flag(value, name)


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
    patience: float | None = None,
) -> list[list[Hypothesis]]:
    """Decode a padded batch of sources (B, Ls); beam 1 is greedy. At most a · (input pieces) + b
    output pieces per sentence, then </s>, capped by the model's max_len. `constrain(stepper,
    max_lens)` may wrap the stepper to forbid moves (e.g. `constrain.TreeConstraint`);
    `patience`: see `beam_search`."""
    check_settings(beam, alpha, max_len_a, max_len_b, n_best, model.config.target_vocab, patience)
    beam, alpha, max_len_a = int(beam), float(alpha), float(max_len_a)  # NumPy's numbers as Python's
    n_best = None if n_best is None else int(n_best)
    model.check_ids(src, "source")  # before reading lengths off it: a 1-D or empty tensor is one line
    src_lens = src.ne(model.config.pad_id).sum(1).tolist()
    if 0 in src_lens:
        raise ModelInputError(f"source row {src_lens.index(0)} is all padding: nothing to translate")
    with evaluating(model):
        settings = (beam, alpha, max_len_a, max_len_b, cache, n_best, constrain, patience)
        return _generate(model, src, src_lens, *settings)


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """`model` in eval mode for the block: a search, a score or a recording is a function of its
    input, not of dropout's draw (a model left in train mode after fine-tuning scored one pair
    -0.61, -0.89, -1.08 in three calls). A caller validating inside a training loop keeps its
    mode after the block. Switched only where a module trains (eval() walks every one: 1.7 ms)."""
    was_training = model.training
    switch = any(module.training for module in model.modules())
    if switch:
        model.eval()
    try:
        yield
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
    patience: float | None,
) -> list[list[Hypothesis]]:
    # max_lens count the </s>, src_lens the source's: a · input + b pieces, then </s>, as tensor2tensor's
    # decode_length (both lengths with their end) allowed. (An earlier limit counted the output's </s>
    # among the b, one piece short of the paper's input + 50.) Capped in float: int() of
    # --max-len-a 1e308's infinity was an OverflowError.
    limit = model.config.max_len - 1
    max_lens = [int(min(limit, max_len_a * (n - 1) + max_len_b + 1)) for n in src_lens]
    if min(max_lens) < 2:  # only </s> would fit: an empty output, not an answer
        pieces = src_lens[max_lens.index(min(max_lens))] - 1
        raise ConfigError(
            f"the length limit max_len_a × input + max_len_b = {max_len_a:g} × {pieces} + {max_len_b:g} leaves "
            "no room for one token before </s>: raise max_len_a or max_len_b"
        )
    stepper: Stepper = TransformerStepper(model, src, cache=cache, positions=max(max_lens) + 1)
    if constrain is not None:
        stepper = constrain(stepper, max_lens)
    eos, bos = model.config.eos_id, model.config.bos_id
    if beam <= 1:
        return [[h] for h in greedy_search(stepper, max_lens, bos, eos, alpha)]
    return beam_search(stepper, max_lens, beam, alpha, bos, eos, n_best, None if patience is None else float(patience))
