"""Token-budget batches (§5.1) and the tensors the model reads.

§5.1: "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." `TokenBatchSampler` sorts pairs by length (ties broken at random per epoch), cuts the
sorted list greedily into the largest batches that fit the budget, and shuffles the batch order.

The budget rule, exactly: a batch of n pairs is allowed when n * max_i(max(src_len_i + 1,
tgt_len_i + 1)) <= max_tokens. The +1 is the EOS on the source and the BOS/EOS shift on the target
that `collate` adds, so the padded source tensor and each padded target tensor have at most
`max_tokens` entries.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from attnlab.errors import DataError


class TokenBatchSampler:
    """Batches of pair indices under a token budget, deterministic in (seed, epoch), resumable.

    Sharding: every rank builds the same global batch list and takes batches rank, rank + W, ...
    An update reads G = W · update_freq micro-batches, and the global list depends on G only: when
    the batch count is not a multiple of G, the largest batches are split in two until it is. So
    no pair is dropped or repeated, every rank runs the same number of steps (DDP stays in
    lockstep), every epoch ends on an update boundary, and update k reads global batches
    kG .. kG + G - 1 whether they come from W ranks × update_freq F or from one process with
    update_freq W·F (rank r's i-th micro-batch of the update is global batch kG + iW + r). That is
    what makes W ranks train exactly like one process with `--update-freq W`.

    Iteration yields the batches of the current epoch not yielded yet; as with PyTorch's
    DistributedSampler, the caller moves on with `set_epoch(epoch + 1)`. `state_dict()` taken
    between batches and given to `load_state_dict()` resumes with exactly the batches that had not
    been yielded yet, also when it was taken after the last batch of an epoch.
    """

    def __init__(
        self,
        src_lens: Sequence[int] | np.ndarray,
        tgt_lens: Sequence[int] | np.ndarray,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        update_freq: int = 1,
    ) -> None:
        self.sizes = np.maximum(np.asarray(src_lens, np.int64), np.asarray(tgt_lens, np.int64)) + 1
        if len(src_lens) != len(tgt_lens):
            raise DataError(f"{len(src_lens)} source lengths but {len(tgt_lens)} target lengths")
        if not 0 <= rank < world_size:
            raise DataError(f"rank {rank} is outside world size {world_size}")
        if update_freq < 1:
            raise DataError(f"update_freq must be at least 1, got {update_freq}")
        if len(self.sizes) < world_size * update_freq:
            raise DataError(
                f"{len(self.sizes)} pairs cannot fill {world_size} ranks × {update_freq} micro-batches per update"
            )
        too_long = np.flatnonzero(self.sizes > max_tokens)
        if too_long.size:
            raise DataError(
                f"{too_long.size} pairs need more than --max-tokens {max_tokens} on their own "
                f"(pair {too_long[0]} needs {self.sizes[too_long[0]]}); raise --max-tokens or prepare with a lower --max-len"
            )
        self.max_tokens, self.seed, self.shuffle = max_tokens, seed, shuffle
        self.rank, self.world_size, self.update_freq = rank, world_size, update_freq
        self._epoch, self._position = 0, 0
        self._cache: tuple[int, list[np.ndarray]] | None = None

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first batch; the current epoch is left where it is.

        So a trainer may call `set_epoch(e)` at the top of every epoch, also right after
        `load_state_dict`, without losing the restored position.
        """
        if epoch != self._epoch:
            self._epoch, self._position = epoch, 0

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same every epoch and on every rank)."""
        return len(self._batches(self._epoch)) // self.world_size

    def __iter__(self) -> Iterator[np.ndarray]:
        mine = self._batches(self._epoch)[self.rank :: self.world_size]
        while self._position < len(mine):
            self._position += 1  # counted before yielding: a state saved now resumes after this batch
            yield mine[self._position - 1]

    def state_dict(self) -> dict[str, Any]:
        """Position (epoch, batches already yielded in it) plus what must match on restore."""
        return {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "world_size": self.world_size,
            "update_freq": self.update_freq,
            "n_pairs": len(self.sizes),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state`'s position, also with another number of ranks: the epoch's batch list
        depends on ranks × update_freq only, so W ranks with update_freq F continue on W' ranks
        with F' where W'·F' = W·F (8 GPUs on 4 with --update-freq 2), at the same global batch."""
        for key in ("seed", "max_tokens", "n_pairs"):
            mine = len(self.sizes) if key == "n_pairs" else getattr(self, key)
            if state.get(key, mine) != mine:
                raise DataError(f"cannot resume batches: saved {key}={state[key]} but this run has {mine}")
        world, freq = state.get("world_size", self.world_size), state.get("update_freq", self.update_freq)
        if world * freq != self.world_size * self.update_freq:
            product = world * freq  # (what to type with these processes: the run's own --update-freq was kept)
            here = f" (here: --update-freq {product // self.world_size})" if product % self.world_size == 0 else ""
            raise DataError(
                f"cannot resume batches: the run read {product} micro-batches an update ({world} process(es) × "
                f"--update-freq {freq}) and this one would read {self.world_size * self.update_freq} "
                f"({self.world_size} × {self.update_freq}); resume with processes × --update-freq = {product}{here}"
            )
        read = int(state["position"]) * world  # the epoch's batches read by all ranks together
        if read % self.world_size:
            raise DataError(f"cannot resume batches: {read} batches read cannot be shared by {self.world_size} ranks")
        self._epoch, self._position = int(state["epoch"]), read // self.world_size

    def _batches(self, epoch: int) -> list[np.ndarray]:
        """The global batch list of an epoch, computed once per epoch."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def _make_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        order = rng.permutation(len(self.sizes)) if rng else np.arange(len(self.sizes))
        order = order[np.argsort(self.sizes[order], kind="stable")]  # by length; ties stay in random order
        batches = _fill(order, self.sizes[order], self.max_tokens)
        batches = _split_largest(batches, (-len(batches)) % (self.world_size * self.update_freq))
        if rng:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _fill(order: np.ndarray, sizes: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut pairs sorted by ascending size into the longest runs with count * last size <= budget.

    With sizes ascending, the last pair of a run is its longest, and count * size grows along the
    run, so each run ends where that product first exceeds the budget.
    """
    batches = []
    start = 0
    while start < len(order):
        window = sizes[start : start + max_tokens // sizes[start]]
        fits = np.arange(1, len(window) + 1) * window <= max_tokens
        end = start + int(fits.sum())  # `fits` is a run of True then False
        batches.append(order[start:end])
        start = end
    return batches


def _split_largest(batches: list[np.ndarray], extra: int) -> list[np.ndarray]:
    """Split the batches with the most pairs in two, `extra` times (halves still fit the budget)."""
    for _ in range(extra):
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        batch = batches[largest]
        if len(batch) < 2:
            raise DataError(
                f"too few pairs to make the batch count a multiple of ranks × update_freq (need {extra} more)"
            )
        batches[largest : largest + 1] = [batch[: len(batch) // 2], batch[len(batch) // 2 :]]
    return batches


SCORED_ROWS = 16  # oneDNN's bf16 products run 10-20% slower on a row count like 1,851 than on 1,856


@dataclass
class Batch:
    """Padded tensors for one step: `src` (B, Ls), `tgt_in`/`tgt_out` (B, Lt), all int64."""

    src: torch.Tensor  # ids + [EOS]
    tgt_in: torch.Tensor  # [BOS] + ids: what the decoder reads (shifted right, §3.1)
    tgt_out: torch.Tensor  # ids + [EOS]: what it must predict
    n_tgt_tokens: int  # non-pad entries of tgt_out, the loss normaliser
    indices: np.ndarray  # pair indices in the split
    # flat indices of tgt_out's non-pad entries, found here on the host: the trainer scores only
    # these positions (`Transformer.forward(..., scored)`), with no sync; topped up with pad
    # entries to a multiple of SCORED_ROWS where padding allows (the loss masks pad targets)
    scored: torch.Tensor

    @property
    def scored_targets(self) -> torch.Tensor:
        """The ids the scored positions must predict, in `scored`'s order (pad for the top-up)."""
        return self.tgt_out.flatten()[self.scored]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        move = {"device": device, "non_blocking": non_blocking}
        return Batch(
            self.src.to(**move),
            self.tgt_in.to(**move),
            self.tgt_out.to(**move),
            self.n_tgt_tokens,
            self.indices,
            self.scored.to(**move),
        )


def collate(
    data: ParallelData,
    indices: Sequence[int] | np.ndarray,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> Batch:
    """Gather pairs `indices` of a prepared split into a padded `Batch`."""
    indices = np.asarray(indices, np.int64)
    src_ids, src_lengths = data.src_rows(indices, pad_id)  # (B, longest), padded, without BOS/EOS
    tgt_ids, tgt_lengths = data.tgt_rows(indices, pad_id)
    src = _with_eos(src_ids, src_lengths, pad_id, eos_id)
    tgt_in = torch.from_numpy(np.pad(tgt_ids, ((0, 0), (1, 0)), constant_values=bos_id))
    tgt_out = _with_eos(tgt_ids, tgt_lengths, pad_id, eos_id)
    real = tgt_out.flatten().ne(pad_id)
    kept = int(real.sum())
    scored = real.clone()  # and the first pad positions, up to a multiple of SCORED_ROWS
    scored[(~real).nonzero().squeeze(1)[: -kept % SCORED_ROWS]] = True
    return Batch(src, tgt_in, tgt_out, kept, indices, scored.nonzero().squeeze(1))  # (in order: no sort)


def _with_eos(ids: np.ndarray, lengths: np.ndarray, pad_id: int, eos_id: int) -> torch.Tensor:
    """(B, L) padded rows -> (B, L + 1) with EOS after each row's last id."""
    out = np.pad(ids, ((0, 0), (0, 1)), constant_values=pad_id)
    out[np.arange(len(out)), lengths] = eos_id
    return torch.from_numpy(out)
