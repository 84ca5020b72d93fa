"""One update of the weights (§5.3-5.4), waiting on the device once.

On a GPU the host queues work that the device runs later. Each read of a device value in between
(a loss's `.item()`, the gradient norm's `float()`) makes the host wait for the device to drain,
and the device then idles while Python collates the next batch, copies it and queues the next
step: 19% of base's step on an H200 (docs/BENCHMARKS.md, GPU round one). So here the losses are
summed on the device; the finiteness check is the device's (fused Adam's `found_inf`, as
`torch.amp.GradScaler` uses it: a non-finite update leaves weights, moments and step counts as
they were); the next update's batches are collated, checked and copied while the device works
(`then`); and one read at the end brings back the loss, the NLL and the gradient norm together.
The arithmetic is the eager loop's: the same sums, in float64, in the same order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from attnlab.data.batching import Batch
from attnlab.model import kernels
from attnlab.model.memory import out_of_memory
from attnlab.model.transformer import Transformer
from attnlab.train.guard import TrainingError
from attnlab.train.regime import training_kernels

Next = TypeVar("Next")
PINNED = ("src", "tgt_in", "tgt_out", "scored")  # a Batch's tensors


@dataclass
class DeviceBatch:
    """A micro-batch as the step reads it, already on the training device."""

    src: Tensor
    tgt_in: Tensor
    scored: Tensor  # flat positions of tgt_out that get logits (non-pad, topped up; `Batch.scored`)
    target: Tensor  # what those positions must predict
    tokens: int  # non-pad target tokens, this micro-batch's share of the normaliser


def stage(batch: Batch, model: Transformer, device: torch.device, check_ids: bool) -> DeviceBatch:
    """`batch` on `device`, copied without waiting for the device (from pinned memory on a GPU:
    a copy from pageable memory waits for the stream to drain). `check_ids`: the model is
    compiled, and its graph skips the model's own id checks, so they run here, on the host."""
    if check_ids:
        model.check_ids(batch.src, "source")
        model.check_ids(batch.tgt_in, "target", model.config.target_vocab)
    if device.type == "cuda":
        batch = dataclasses.replace(batch, **{k: getattr(batch, k).pin_memory() for k in PINNED})
    moved = batch.to(device, non_blocking=True)
    return DeviceBatch(moved.src, moved.tgt_in, moved.scored, moved.scored_targets, batch.n_tgt_tokens)


@dataclass
class Outcome(Generic[Next]):
    """What the one read brings back: the update's summed loss and NLL (all ranks'), the gradient
    norm before clipping, and what `then` made while the device worked."""

    loss: float
    nll: float
    norm: float
    then: Next | None

    @property
    def finite(self) -> bool:
        """False when the device skipped the update (a nan or inf loss or gradient)."""
        return all(map(math.isfinite, (self.loss, self.nll, self.norm)))


@dataclass
class Update:
    """The update rule, set up once: the network to run (`net`: compiled and/or DDP-wrapped
    `model`), fused Adam (`make_optimizer`), the loss function, and how the ranks combine."""

    net: torch.nn.Module
    model: Transformer
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[..., tuple[Tensor, Tensor]]
    autocast: bool
    world: int = 1
    clip_norm: float = 0.0

    def __call__(
        self, micro: list[DeviceBatch], total_tokens: float, seeds: list[int], then: Callable[[], Next] | None = None
    ) -> Outcome[Next]:
        """Accumulate the gradient of Σ loss / `total_tokens` (all ranks' target tokens; DDP
        averages over the ranks, so each scales by `world`) over `micro`, drawing micro-batch i's
        dropout masks from `seeds[i]`, then clip and step Adam at the learning rate already set.
        A non-finite loss or gradient norm skips the step on the device."""
        config, device = self.model.config, micro[0].src.device
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(2, dtype=torch.float64, device=device)  # this rank's (loss, NLL)
        for i, (batch, seed) in enumerate(zip(micro, seeds, strict=True)):
            torch.manual_seed(seed)
            last = i == len(micro) - 1 or self.world == 1  # DDP all-reduces the gradients after the last only
            try:
                with (
                    contextlib.nullcontext() if last else self.net.no_sync(),
                    training_kernels(device.type, self.autocast),
                    torch.autocast(device.type, torch.bfloat16, enabled=self.autocast),
                ):
                    logits = self.net(batch.src, batch.tgt_in, batch.scored)
                    loss, nll = self.loss_fn(logits, batch.target, config.eps_ls, config.pad_id)
                    (loss * self.world / total_tokens).backward()
            except RuntimeError as error:  # (the model fitted; its activations at this batch size do not)
                if not out_of_memory(error):
                    raise
                raise TrainingError(
                    f"a micro-batch of {batch.src.shape[0]:,} pairs ({batch.tokens:,} target tokens, padded to "
                    f"{batch.src.shape[1]} and {batch.tgt_in.shape[1]}) does not fit in memory on {device}; "
                    "lower --max-tokens, and raise --update-freq to keep the tokens per update"
                ) from None
            sums += torch.stack([loss.detach(), nll.detach()]).double()
        if self.world > 1:
            dist.all_reduce(sums)  # the whole update's, on every rank
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = kernels.grad_norm(grads)  # of all-reduced gradients: the same on every rank
        if norm is None:  # (not fp32 CPU tensors, or no kernels)
            norm = torch.nn.utils.get_total_norm(grads)
        skip = ~(torch.isfinite(sums).all() & torch.isfinite(norm))
        if self.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), self.clip_norm, norm)
        self.optimizer.found_inf = skip.float()  # read by fused Adam's kernel on the device
        self.optimizer.step()
        made = then() if then is not None else None  # host work while the device runs the step
        loss_sum, nll_sum, norm_value = torch.cat([sums, norm.double().reshape(1)]).tolist()  # the one wait
        return Outcome(loss_sum, nll_sum, norm_value, made)
