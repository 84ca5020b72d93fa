"""Decoding: cache = no cache, beam 1 = greedy, a scripted toy decoder, length penalty."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import strategies as st
from properties import examples, prove

from attnlab import preset
from attnlab.decode.api import DEFAULTS
from attnlab.decode.deadline import time_limit
from attnlab.decode.search import beam_search, generate, greedy_search, length_penalty
from attnlab.decode.stepper import TransformerStepper, top_moves
from attnlab.errors import ConfigError, TimeLimitError
from attnlab.model import cache as cache_module
from attnlab.model.transformer import KVCache, Transformer
from attnlab.record.recorder import record


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(1)
    return Transformer(preset("tiny", n_layers=3)).eval()


def test_cached_step_logits_equal_full_forward(model: Transformer) -> None:
    src = torch.randint(4, 1000, (2, 7))
    src[1, 5:] = 0
    tgt = torch.randint(4, 1000, (2, 6))
    tgt[:, 0] = 2
    with torch.no_grad():
        full = model(src, tgt)
        mask = model.src_mask(src)
        memory = model.encode(src, mask)
        cache = KVCache()
        steps = [model.logits(model.decode(tgt[:, t : t + 1], memory, mask, cache)) for t in range(6)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert cache.length == 6 and cache.slots.shape == (2, 6)


def test_cache_and_no_cache_decode_the_same(model: Transformer) -> None:
    src = torch.randint(4, 1000, (3, 8))
    for beam in (1, 4):
        a = generate(model, src, beam=beam, max_len_b=12, cache=True)
        b = generate(model, src, beam=beam, max_len_b=12, cache=False)
        assert [[h.tokens for h in s] for s in a] == [[h.tokens for h in s] for s in b]
        # every hypothesis, not only the best: a random model repeats one token, so equal tokens
        # alone say little; the scores differ by ~3e-6 (rounding), a cache bug moves them by far more
        assert [h.score for s in a for h in s] == pytest.approx([h.score for s in b for h in s], abs=1e-4)


def test_the_cache_is_made_as_long_as_the_search_allows(model: Transformer, monkeypatch) -> None:
    """`generate` makes each layer's stores as long as the longest output it allows: made at the
    first step and again when the beam widens the rows, then never copied while it decodes past
    16 positions (doubling from 16 copied them at 16 and 32); past `STORE_BYTES` it doubles as
    before; both decode the same."""
    src = torch.randint(4, 1000, (3, 8))
    stores: list[tuple[int, int]] = []  # (data_ptr, capacity) of layer 0's key store after each step
    real = cache_module.store

    def spy(past, k, v) -> None:
        real(past, k, v)
        if past is first_layer[0]:
            stores.append((past["k"].data_ptr(), past["k"].size(0)))

    first_layer: list[dict] = []
    monkeypatch.setattr(cache_module, "store", spy)
    real_advance = KVCache.advance

    def advance(self, rows, positions, device) -> None:
        real_advance(self, rows, positions, device)
        first_layer[:] = [self.layers[0]["self"]]

    monkeypatch.setattr(KVCache, "advance", advance)
    roomy = generate(model, src, beam=4, max_len_b=40)
    assert len(stores) > 20 and {capacity for _, capacity in stores} == {49}  # 7 + 40 + </s> + <s>
    assert len({pointer for pointer, _ in stores}) == 2  # step 1 (3 rows), step 2 (12 rows)
    stores.clear()
    monkeypatch.setattr(cache_module, "STORE_BYTES", 1000)
    doubled = generate(model, src, beam=4, max_len_b=40)
    assert [capacity for _, capacity in stores][:16] == [16] * 16
    assert [capacity for _, capacity in stores][-1] == 64 and len({pointer for pointer, _ in stores}) == 4
    assert [[h.tokens for h in s] for s in roomy] == [[h.tokens for h in s] for s in doubled]


def test_beams_share_one_copy_of_the_source(model: Transformer) -> None:
    """A sentence's beams read one copy of its encoder output and cross-attention K/V; the
    numbers equal those of one copy per row, also after a reorder that breaks the blocks."""
    src = torch.randint(4, 1000, (3, 8))
    src[1, 6:] = 0
    shared, per_row = TransformerStepper(model, src), TransformerStepper(model, src.repeat_interleave(4, 0))
    shared.start(torch.arange(3).repeat_interleave(4))
    per_row.start(torch.arange(12))
    assert shared.memory.size(0) == 3 and per_row.memory.size(0) == 12
    tokens = torch.full((12, 1), 2)
    with torch.no_grad():
        assert torch.allclose(shared.step(tokens), per_row.step(tokens), atol=1e-5)
        assert shared.cache.layers[0]["cross"]["k"].size(0) == 3
        for index in (torch.tensor([1, 1, 0, 3, 5, 5, 4, 4, 11, 8, 8, 8]), torch.tensor([0, 4, 1, 5, 2, 6])):
            shared.reorder(index)
            per_row.reorder(index)
            tokens = torch.cat([tokens.index_select(0, index), torch.randint(4, 1000, (len(index), 1))], dim=1)
            assert torch.allclose(shared.step(tokens), per_row.step(tokens), atol=1e-5)
    assert shared.memory.size(0) == 6  # [0, 4, 1, 5, 2, 6] is not in blocks: one copy per row


def test_recording_while_beam_decoding_changes_nothing(model: Transformer) -> None:
    src = torch.randint(4, 1000, (3, 8))
    plain = generate(model, src, beam=4, max_len_b=6)
    with record(model) as rec:
        recorded = generate(model, src, beam=4, max_len_b=6)
    assert [[h.tokens for h in s] for s in plain] == [[h.tokens for h in s] for s in recorded]
    # measured gap 4e-6 (fused vs explicit rounding); tokens alone can hide a change (see above)
    assert [h.logprob for s in plain for h in s] == pytest.approx([h.logprob for s in recorded for h in s], abs=1e-4)
    steps = rec.captures[("cross", 0)].weights
    assert [tuple(w.shape[:3]) for w in steps[:2]] == [(3, 4, 1), (12, 4, 1)]  # one row, then a row per beam
    assert all(torch.allclose(w.sum(-1), torch.ones(())) for w in steps)


def test_beam_one_equals_greedy(model: Transformer) -> None:
    src = torch.randint(4, 1000, (4, 6))
    lens = [15] * 4
    beam1 = beam_search(TransformerStepper(model, src), lens, beam=1, alpha=0.0)
    greedy = greedy_search(TransformerStepper(model, src), lens)
    assert [b[0].tokens for b in beam1] == [g.tokens for g in greedy]
    assert [b[0].logprob for b in beam1] == pytest.approx([g.logprob for g in greedy], abs=1e-5)


def test_a_time_limit_stops_decoding_with_one_line(model: Transformer) -> None:
    """A served explorer decodes one request at a time: `time_limit` bounds what one takes."""
    src = torch.randint(4, 1000, (2, 6))
    free = generate(model, src, beam=4)
    with time_limit(0.0):  # 0: no limit
        assert [h[0].tokens for h in generate(model, src, beam=4)] == [h[0].tokens for h in free]
    with time_limit(60.0):
        assert [h[0].tokens for h in generate(model, src, beam=4)] == [h[0].tokens for h in free]
    for beam in (1, 4):  # greedy and beam search both step through TransformerStepper
        with time_limit(1e-9), pytest.raises(TimeLimitError, match=r"^decoding stopped after 1e-09 s, its time limit"):
            generate(model, src, beam=beam)
    assert generate(model, src, beam=4)[0][0].tokens == free[0][0].tokens  # the limit ended with its block
    for bad in (-1.0, math.nan, math.inf * -1):
        with pytest.raises(ConfigError, match="time limit must be a number of seconds"), time_limit(bad):
            pass


class NoEnd:
    """A stepper that never chooses </s> (id 3): every hypothesis runs to the length limit."""

    def __init__(self, inner: TransformerStepper) -> None:
        self.inner = inner

    def start(self, rows: torch.Tensor) -> None:
        self.inner.start(rows)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.step(tokens).index_fill(1, torch.tensor([3]), float("-inf"))

    def reorder(self, index: torch.Tensor) -> None:
        self.inner.reorder(index)


def test_max_length_is_input_plus_b(model: Transformer) -> None:
    """§6.1: at most input length + 50 pieces, then </s> (as tensor2tensor's decode_length, which
    counts the input's end and the output's); a hypothesis that has not ended by then ends there.
    A decoder that never ends shows the limit itself, not just a bound."""
    src = torch.randint(4, 1000, (2, 6))  # 5 and 3 pieces + the position that stands for </s>
    src[1, 4:] = 0
    for b in (3, 50):
        found = generate(model, src, beam=4, max_len_b=b, constrain=lambda stepper, _: NoEnd(stepper))
        for pieces, hypotheses in zip((5, 3), found, strict=True):
            assert hypotheses and {len(h.tokens) for h in hypotheses} == {pieces + b + 1}  # and </s>
            assert all(h.tokens[-1] == 3 and 3 not in h.tokens[:-1] for h in hypotheses)


def test_the_tasks_decode_with_the_papers_settings() -> None:
    """§6.1: beam 4, α 0.6, input + 50; §6.3 (parsing): beam 21, α 0.3, input + 300."""
    assert DEFAULTS == {
        "translate": {"beam": 4, "alpha": 0.6, "max_len_b": 50},
        "parse": {"beam": 21, "alpha": 0.3, "max_len_b": 300},
    }


def test_length_penalty_is_gnmts() -> None:
    """Wu et al. (2016), as §6.1 uses it: lp(Y) = (5 + |Y|)^α / (5 + 1)^α."""
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 1.0) == 2.0
    assert length_penalty(10, 0.6) == pytest.approx(2.5**0.6, rel=1e-12)
    assert length_penalty(25, 0.0) == 1.0


class Scripted:
    """A toy decoder: the next-token distribution depends only on the prefix, from a table."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 8) -> None:
        self.table, self.vocab = table, vocab

    def start(self, rows: torch.Tensor) -> None:
        pass

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        out = torch.full((tokens.size(0), self.vocab), float("-inf"))
        for i, row in enumerate(tokens.tolist()):
            for token, p in self.table.get(tuple(row[1:]), {3: 1.0}).items():
                out[i, token] = math.log(p)
        return out

    def reorder(self, index: torch.Tensor) -> None:
        pass


@examples(150)
def test_top_moves_are_topk(examples: int) -> None:
    """The chunked top-k gives `topk`'s values, sorted, at indices that hold them (distinct per
    row), for vocabularies with and without a ragged last chunk, ties and -inf entries."""

    def holds(rows: int, chunks: int, ragged: int, k: int, levels: int, seed: int) -> None:
        chunk = 4
        vocab = chunks * chunk + ragged
        generator = torch.Generator().manual_seed(seed)
        lprobs = -torch.randint(0, levels, (rows, vocab), generator=generator).float()  # many ties
        lprobs[torch.rand(rows, vocab, generator=generator) < 0.3] = float("-inf")
        lprobs[0, -1] = 1.0  # a winner in the last column (the ragged chunk when there is one)
        values, indices = top_moves(lprobs, k, chunk)
        assert torch.equal(values, lprobs.topk(min(k, vocab), dim=1).values)
        assert torch.equal(lprobs.gather(1, indices), values)
        assert all(len(set(row)) == len(row) for row in indices.tolist())

    prove(
        holds,
        examples,
        rows=st.integers(1, 4),
        chunks=st.integers(1, 80),
        ragged=st.integers(0, 3),
        k=st.integers(1, 8),
        levels=st.sampled_from([2, 5, 1000]),
        seed=st.integers(0, 2**16),
    )


def test_scripted_decoder_known_best() -> None:
    # greedy takes 4 (0.6) then is stuck with 0.3 at best: 0.18; beam finds 5 then 6 (0.4 * 0.9 = 0.36)
    table = {
        (): {4: 0.6, 5: 0.4},
        (4,): {6: 0.3, 7: 0.3, 3: 0.4 - 1e-9},
        (5,): {6: 0.9, 3: 0.1},
        (4, 6): {3: 1.0},
        (4, 7): {3: 1.0},
        (5, 6): {3: 1.0},
    }
    best = beam_search(Scripted(table), [10], beam=2, alpha=0.0)[0][0]
    assert best.tokens == [5, 6, 3] and best.logprob == pytest.approx(math.log(0.36))
    assert greedy_search(Scripted(table), [10])[0].tokens == [4, 3]


def test_length_penalty_changes_the_winner() -> None:
    # short: P = 0.5 (1 token + </s>); long: P = 0.45 (4 tokens + </s>). α = 0 picks short; α = 1 long.
    table = {
        (): {4: 0.5, 5: 0.5},
        (4,): {3: 1.0},
        (5,): {5: 0.9, 3: 0.1},
        (5, 5): {6: 1.0},
        (5, 5, 6): {7: 1.0},
        (5, 5, 6, 7): {3: 1.0},
    }
    assert beam_search(Scripted(table), [10], beam=2, alpha=0.0)[0][0].tokens == [4, 3]
    winner = beam_search(Scripted(table), [10], beam=2, alpha=1.0)[0][0]
    assert winner.tokens == [5, 5, 6, 7, 3]
    assert winner.score == pytest.approx(math.log(0.45) / length_penalty(5, 1.0))


def test_a_sentence_goes_on_while_a_live_hypothesis_can_still_win() -> None:
    """tensor2tensor's rule, which the paper decoded with: two hypotheses have ended ([5, 3] and
    [4, 3]), but the live [4, 7] may still beat them once normalised (α = 1), and does. fairseq's
    rule stopped once `beam` had ended and returned [5, 3] (12 of test2016's 1,000 outputs)."""
    table = {(): {4: 0.5, 5: 0.3, 6: 0.2}, (4,): {3: 0.52, 7: 0.48}, (5,): {3: 0.9, 7: 0.1}, (4, 7): {3: 1.0}}
    found = beam_search(Scripted(table), [10], beam=2, alpha=1.0)[0]
    assert [h.tokens for h in found] == [[4, 7, 3], [5, 3]]
    assert found[0].score == pytest.approx(math.log(0.24) / length_penalty(3, 1.0))


def test_patience_stops_once_patience_times_beam_hypotheses_have_ended() -> None:
    """fairseq's and CTranslate2's search: with `patience` 1 the sentence stops at two endings
    and returns [5, 3]; 1.5 waits for round(1.5 · 2) = 3, which the live [4, 7] reaches. Only the
    `beam` best moves may end: </s> ranked second with a beam of one is not an answer (counted,
    low-ranked endings stopped test2016's sentences early: BLEU 37.65 against fairseq's 38.45)."""
    table = {(): {4: 0.5, 5: 0.3, 6: 0.2}, (4,): {3: 0.52, 7: 0.48}, (5,): {3: 0.9, 7: 0.1}, (4, 7): {3: 1.0}}
    fairseq = beam_search(Scripted(table), [10], beam=2, alpha=1.0, patience=1.0)[0]
    assert [h.tokens for h in fairseq] == [[5, 3], [4, 3]]
    assert beam_search(Scripted(table), [10], beam=2, alpha=1.0, patience=1.5)[0][0].tokens == [4, 7, 3]
    table = {(): {4: 0.6, 3: 0.4}, (4,): {3: 0.5, 5: 0.5}, (4, 5): {3: 1.0}}
    found = beam_search(Scripted(table), [10], beam=1, alpha=0.0, patience=1.0)[0]
    assert found[0].tokens[0] == 4 and found[0].logprob == pytest.approx(math.log(0.3))


def test_any_of_the_best_two_beam_moves_may_end_a_hypothesis() -> None:
    """</s> ranked second with a beam of one ([3], P 0.4) beats the live move's every ending
    ([4, 3], P 0.3): counted only among the top `beam` moves (fairseq), it was never found."""
    table = {(): {4: 0.6, 3: 0.4}, (4,): {3: 0.5, 5: 0.5}, (4, 5): {3: 1.0}}
    found = beam_search(Scripted(table), [10], beam=1, alpha=0.0)[0]
    assert found[0].tokens == [3] and found[0].logprob == pytest.approx(math.log(0.4))


def test_an_ending_move_leaves_beam_live_hypotheses() -> None:
    """Each row offers its best 2·beam moves: when </s> takes one of a sentence's top `beam`
    places, `beam` hypotheses still go on. With `beam` moves a row, the first step's one row kept
    a single live hypothesis (and a dead copy), and [5, ...] was never read."""

    class Reading(Scripted):
        rows: list[list[list[int]]] = []

        def step(self, tokens: torch.Tensor) -> torch.Tensor:
            Reading.rows.append(tokens.tolist())
            return super().step(tokens)

    table = {(): {4: 0.45, 3: 0.35, 5: 0.2}, (4,): {3: 0.9, 6: 0.1}, (5,): {3: 1.0}}
    found = beam_search(Reading(table), [10], beam=2, alpha=0.0)[0]
    assert sorted(Reading.rows[1]) == [[2, 4], [2, 5]]  # (bos 2): both live hypotheses read at step 2
    assert [h.tokens for h in found] == [[4, 3], [3]]


def test_early_stop_and_forced_end() -> None:
    table = {(): {4: 1.0}, (4,): {4: 1.0}, (4, 4): {4: 1.0}, (4, 4, 4): {4: 1.0}}
    hyp = beam_search(Scripted(table), [3], beam=2, alpha=0.6)[0][0]
    assert hyp.tokens == [4, 4, 3]  # cut at max length 3 with </s> forced


def test_search_stops_once_no_live_hypothesis_can_win() -> None:
    """tensor2tensor's early stop: "4 </s>" (P 0.81) is settled as soon as the other beam's prefix
    is too improbable to beat it even at the length limit. fairseq's rule alone (beam 2 needs two
    finished hypotheses) would run that beam, which never ends, to the limit of 50."""

    class Looping(Scripted):
        steps = 0

        def step(self, tokens: torch.Tensor) -> torch.Tensor:
            Looping.steps += 1
            out = torch.full((tokens.size(0), self.vocab), float("-inf"))
            for i, row in enumerate(tokens.tolist()):
                for token, p in self.table.get(tuple(row[1:]), {6: 0.5, 7: 0.5}).items():
                    out[i, token] = math.log(p)
            return out

    table = {(): {4: 0.9, 5: 0.1}, (4,): {3: 0.9, 6: 0.1}}
    found = beam_search(Looping(table), [50], beam=2, alpha=0.6)[0]
    assert [h.tokens for h in found] == [[4, 3]] and Looping.steps == 2
