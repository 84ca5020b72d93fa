"""The ranks of a `torchrun` run and what makes W of them train exactly like one process with
`--update-freq W`: the same micro-batches per update (TokenBatchSampler's global batch list),
the same normaliser (`all_sum` of the update's target tokens) and the same dropout masks
(`micro_seed`). What remains different is the order in which floating-point gradients are added.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from attnlab.errors import ConfigError

_host_group: dist.ProcessGroup | None = None  # set once by `distributed`; see `all_sum`


def distributed() -> tuple[int, int]:
    """(rank, world size); initialises the process group when run under torchrun, and beside
    NCCL on GPUs a gloo group over the same ranks for the host's own numbers (`all_sum`). On
    CPUs the default group is gloo already: a second one made the workers that torchrun's
    --max-restarts started again hang in gloo's connection to their peers more often (PyTorch's
    rendezvous reuses the first attempt's addresses; 2 of 3 restarts against 0 of 3 without it)."""
    global _host_group
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        gpu = torch.cuda.is_available()
        dist.init_process_group("nccl" if gpu else "gloo")
        _host_group = dist.new_group(backend="gloo") if gpu else None
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def agree(settings: dict[str, Any], world: int) -> None:
    """One line, on every rank, when the ranks were started with other settings: with another
    --max-steps or --save-every one rank waits forever in a collective the others never reach."""
    if world == 1:
        return
    mine = json.dumps(settings, sort_keys=True, default=str)
    every: list[str | None] = [None] * world
    dist.all_gather_object(every, mine)
    first = json.loads(every[0] or "{}")
    for rank, theirs in enumerate(every):
        if theirs != every[0]:
            other = json.loads(theirs or "{}")
            differ = ", ".join(
                f"{k} {other.get(k)!r} (rank 0: {first.get(k)!r})" for k in first if first.get(k) != other.get(k)
            )
            raise ConfigError(f"rank {rank} was started with other settings than rank 0: {differ}")


def all_sum(values: list[float], world: int) -> list[float]:
    """Element-wise sums over the ranks of numbers the host holds (token counts, stop flags), in
    float64 so token counts stay exact. On the host, through gloo: NCCL reduces only GPU tensors,
    and reading one back would wait for the GPU's queue to drain, twice an update."""
    if world == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, group=_host_group)
    return tensor.tolist()


def micro_seed(seed: int, step: int, index: int) -> int:
    """The seed of the dropout masks of micro-batch `index` (0 .. W·F-1) of update `step`.

    A function of the update's global micro-batch only, not of the process that computes it: one
    process with update_freq W draws the same masks for a batch as the rank of W that reads it.
    One stream per process could not do that (rank r would have to start where the masks of the
    r micro-batches before it end), and one seed on every rank would give every rank the same
    masks. Reseeding per micro-batch also makes the masks independent of where a run resumed.
    """
    return int(np.random.SeedSequence([seed, step, index]).generate_state(1, np.uint64)[0])
