"""§5.1 token-budget batching: the budget, coverage, sharding across ranks, exact resume; collate."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from properties import examples, prove

from attnlab import data
from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.data.prepared import padded_rows
from attnlab.errors import DataError


def lengths(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 80, n)
    return src, np.clip(src + rng.integers(-10, 10, n), 1, None)


def epoch_batches(sampler: TokenBatchSampler) -> list[list[int]]:
    """The rest of the current epoch, then on to the next, as the trainer loops."""
    batches = [b.tolist() for b in sampler]
    sampler.set_epoch(sampler.epoch + 1)
    return batches


def test_every_batch_respects_the_budget_rule():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=500, seed=1)
    batches = list(sampler)
    assert sum(len(batch) for batch in batches) == len(src)  # every pair was checked
    for batch in batches:
        assert len(batch) * max(max(src[i], tgt[i]) + 1 for i in batch) <= 500


def test_batches_fill_the_budget_and_group_similar_lengths():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=500, seed=1)
    sizes = np.maximum(src, tgt) + 1
    batches = list(sampler)
    used = sum(len(b) * sizes[b].max() for b in batches) / (500 * len(batches))
    assert used > 0.85  # greedy filling over sorted lengths wastes little of the budget
    assert np.mean([sizes[b].max() - sizes[b].min() for b in batches]) <= 1  # "approximate length"


def test_each_pair_exactly_once_per_epoch_in_a_new_order_each_epoch():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=500, seed=3)
    first = epoch_batches(sampler)
    second = epoch_batches(sampler)
    assert sampler.epoch == 2
    for batches in (first, second):
        assert sorted(i for b in batches for i in b) == list(range(len(src)))
        assert len(batches) == len(sampler)
    assert first != second
    assert first == epoch_batches(TokenBatchSampler(src, tgt, max_tokens=500, seed=3))  # seeded
    # the batches come in random order, not shortest first (without the shuffle of the batches,
    # the pairs' new order alone passed the lines above): no trend in size along the epoch
    longest = [max(max(src[i], tgt[i]) for i in batch) for batch in first]
    assert abs(np.corrcoef(np.arange(len(longest)), longest)[0, 1]) < 0.2
    assert first != epoch_batches(TokenBatchSampler(src, tgt, max_tokens=500, seed=4))


@pytest.mark.parametrize("world_size", [2, 3, 7])
def test_ranks_together_see_exactly_the_pairs_one_rank_sees(world_size):
    src, tgt = lengths()
    single = {i for b in TokenBatchSampler(src, tgt, 500, seed=5) for i in b.tolist()}
    ranks = [TokenBatchSampler(src, tgt, 500, seed=5, rank=r, world_size=world_size) for r in range(world_size)]
    seen = [[i for b in rank for i in b.tolist()] for rank in ranks]
    assert len({len(rank) for rank in ranks}) == 1  # same step count: DDP stays in lockstep
    everything = [i for pairs in seen for i in pairs]
    assert len(everything) == len(set(everything))  # no overlap
    assert set(everything) == single == set(range(len(src)))


def test_uneven_batch_counts_are_evened_by_splitting_not_dropping():
    src, tgt = lengths(200)
    assert len(TokenBatchSampler(src, tgt, 500)) % 2 == 1  # so two ranks need one extra batch
    ranks = [TokenBatchSampler(src, tgt, 500, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    assert sorted(i for rank in ranks for b in rank for i in b.tolist()) == list(range(200))


def test_restoring_a_saved_position_continues_with_the_same_batches():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 500, seed=9, rank=1, world_size=2)
    epoch_batches(sampler)  # finish epoch 0
    iterator = iter(sampler)
    seen = [next(iterator).tolist() for _ in range(5)]
    state = json.loads(json.dumps(sampler.state_dict()))
    rest = [b.tolist() for b in iterator]
    sampler.set_epoch(2)
    rest += epoch_batches(sampler)

    restored = TokenBatchSampler(src, tgt, 500, seed=9, rank=1, world_size=2)
    restored.load_state_dict(state)
    restored.set_epoch(1)  # what a trainer does at the top of an epoch: keeps the restored position
    assert (state["epoch"], state["position"]) == (1, 5)
    assert epoch_batches(restored) + epoch_batches(restored) == rest
    uninterrupted = epoch_batches(_at_epoch(TokenBatchSampler(src, tgt, 500, seed=9, rank=1, world_size=2), 1))
    assert seen + rest[: len(uninterrupted) - 5] == uninterrupted


def test_a_position_saved_at_the_end_of_an_epoch_resumes_with_the_next_epoch():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 500, seed=9)
    list(sampler)
    state = sampler.state_dict()
    next_epoch = epoch_batches(_at_epoch(TokenBatchSampler(src, tgt, 500, seed=9), 1))
    restored = TokenBatchSampler(src, tgt, 500, seed=9)
    restored.load_state_dict(state)
    assert list(restored) == []  # epoch 0 is done: nothing is repeated
    restored.set_epoch(restored.epoch + 1)
    assert epoch_batches(restored) == next_epoch


def test_set_epoch_to_a_new_epoch_starts_it_from_the_beginning():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 500, seed=2)
    next(iter(sampler))
    sampler.set_epoch(4)
    assert epoch_batches(sampler) == epoch_batches(_at_epoch(TokenBatchSampler(src, tgt, 500, seed=2), 4))


def _at_epoch(sampler: TokenBatchSampler, epoch: int) -> TokenBatchSampler:
    sampler.set_epoch(epoch)
    return sampler


def test_without_shuffle_batches_come_shortest_first_every_epoch():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 500, shuffle=False)
    first = epoch_batches(sampler)
    sizes = np.maximum(src, tgt) + 1
    assert [sizes[b].max() for b in first] == sorted(sizes[b].max() for b in first)
    assert epoch_batches(sampler) == first


def test_bad_configurations_are_data_errors():
    src, tgt = lengths(50)
    with pytest.raises(DataError, match="max-tokens 40"):
        TokenBatchSampler(src, tgt, 40)
    with pytest.raises(DataError, match="rank 2"):
        TokenBatchSampler(src, tgt, 500, rank=2, world_size=2)
    state = TokenBatchSampler(src, tgt, 500, world_size=2).state_dict()
    with pytest.raises(DataError, match="the run read 2 micro-batches an update"):  # (2 × 1 = 1 × 2 may resume)
        TokenBatchSampler(src, tgt, 500).load_state_dict(state)


# --- collate on real prepared data ------------------------------------------------------------


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory):
    try:
        root = data.find_data_dir()
    except DataError as error:
        pytest.skip(f"corpora not found ({error})")
    out = tmp_path_factory.mktemp("multi30k")
    data.prepare("multi30k", out, data_dir=root, vocab_size=1000, echo=lambda _: None)
    return data.ParallelData(out, "train")


def test_collate_builds_shifted_padded_tensors_within_the_budget(multi30k):
    sampler = TokenBatchSampler(multi30k.src_lens, multi30k.tgt_lens, max_tokens=2000, seed=0)
    for step, indices in enumerate(sampler):
        batch = collate(multi30k, indices)
        assert batch.src.dtype == batch.tgt_in.dtype == torch.int64
        assert batch.src.numel() <= 2000 and batch.tgt_out.numel() <= 2000
        assert batch.tgt_in.shape == batch.tgt_out.shape
        assert batch.n_tgt_tokens == int((batch.tgt_out != 0).sum())
        # scored: every real target once, topped up with pad positions to a multiple of 16 rows
        assert batch.scored.unique().numel() == batch.scored.numel()
        assert int(batch.scored_targets.ne(0).sum()) == batch.n_tgt_tokens
        assert batch.scored.numel() % 16 == 0 or batch.scored.numel() == batch.tgt_out.numel()
        assert batch.scored.numel() - batch.n_tgt_tokens < 16
        for row, i in enumerate(indices):
            n_src, n_tgt = multi30k.src_lens[i], multi30k.tgt_lens[i]
            assert batch.src[row, :n_src].tolist() == multi30k.src(i).tolist()
            assert batch.src[row, n_src] == 3 and (batch.src[row, n_src + 1 :] == 0).all()
            assert batch.tgt_in[row, 0] == 2 and batch.tgt_out[row, n_tgt] == 3
            assert torch.equal(batch.tgt_in[row, 1 : n_tgt + 1], batch.tgt_out[row, :n_tgt])
        if step == 20:
            break
    assert step == 20  # 21 batches were checked


class _Sentences:
    """A split of the given id lists, served as a prepared split serves them (ids cut at offsets)."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]]) -> None:
        self.sides = [(np.array(sum(s, []), np.uint16), np.cumsum([0] + [len(x) for x in s])) for s in (src, tgt)]

    def src_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        return padded_rows(*self.sides[0], indices, pad)

    def tgt_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        return padded_rows(*self.sides[1], indices, pad)


@examples(200)
def test_collate_frames_and_pads_each_sentence(examples: int) -> None:
    """Each row is its sentence, framed (source + EOS, BOS + target, target + EOS) and padded to
    the batch's longest, for any lengths, empty sentences and repeated indices included."""
    sentence = st.lists(st.integers(4, 60_000), max_size=12)
    pairs = st.lists(st.tuples(sentence, sentence), min_size=1, max_size=10)

    def holds(pairs: list[tuple[list[int], list[int]]], picks: list[int]) -> None:
        indices = [p % len(pairs) for p in picks]
        batch = collate(_Sentences(*zip(*pairs, strict=True)), indices, pad_id=0, bos_id=2, eos_id=3)

        def padded(rows: list[list[int]]) -> list[list[int]]:
            return [row + [0] * (max(map(len, rows)) - len(row)) for row in rows]

        chosen = [pairs[i] for i in indices]
        assert batch.src.tolist() == padded([src + [3] for src, _ in chosen])
        assert batch.tgt_in.tolist() == padded([[2] + tgt for _, tgt in chosen])
        assert batch.tgt_out.tolist() == padded([tgt + [3] for _, tgt in chosen])
        assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.int64
        assert batch.n_tgt_tokens == sum(len(tgt) + 1 for _, tgt in chosen)
        flat = batch.tgt_out.flatten().tolist()  # scored: every target, then the first pads to a multiple of 16
        real, pads = [i for i, t in enumerate(flat) if t], [i for i, t in enumerate(flat) if not t]
        assert batch.scored.tolist() == sorted(real + pads[: -len(real) % 16])

    prove(holds, examples, pairs=pairs, picks=st.lists(st.integers(0, 100), min_size=1, max_size=12))
