"""One update that waits on the device once (attnlab.train.update).

On a CPU nothing waits, so these tests check what makes the GPU's step overlap: the step reads
device values back exactly once, after the next batches were staged, and a non-finite update is
skipped by the device itself (weights, Adam moments and step counts untouched) rather than by a
host check before Adam.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from attnlab import Transformer, preset
from attnlab.data.batching import collate
from attnlab.data.prepared import padded_rows
from attnlab.train.regime import compile_model, label_smoothed_loss, make_loss, make_optimizer
from attnlab.train.update import DeviceBatch, Update, stage

READS = ("item", "tolist", "__float__", "__int__", "__bool__")  # what brings a device value to the host


class _Split:
    """Two sentence pairs of ids, as a prepared split serves them to `collate`."""

    src_ids, tgt_ids = np.array([5, 6, 7, 10, 11]), np.array([8, 9, 12, 13, 14, 15])
    src_offsets, tgt_offsets = np.array([0, 3, 5]), np.array([0, 2, 6])

    def src_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        return padded_rows(self.src_ids, self.src_offsets, indices, pad)

    def tgt_rows(self, indices: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
        return padded_rows(self.tgt_ids, self.tgt_offsets, indices, pad)


def _setup(loss_fn=label_smoothed_loss, p_drop: float = 0.1) -> tuple[Transformer, Update, list[DeviceBatch]]:
    torch.manual_seed(0)
    model = Transformer(preset("tiny", vocab_size=32, p_drop=p_drop))
    optimizer = make_optimizer(model)
    for group in optimizer.param_groups:
        group["lr"] = 1e-2  # moves tiny's weights by ~1e-2 an update: far above any rounding
    micro = [stage(collate(_Split(), [0, 1]), model, torch.device("cpu"), check_ids=True)]
    return model, Update(model, model, optimizer, loss_fn, autocast=False), micro


def _snapshot(model: Transformer, update: Update) -> list[torch.Tensor]:
    state = [t for s in update.optimizer.state.values() for t in s.values()]
    return [p.detach().clone() for p in model.parameters()] + [t.clone() for t in state]


def test_a_nonfinite_update_is_skipped_on_the_device() -> None:
    calls = iter(range(100))

    def poisoned(logits, target, eps, pad_id):  # the third update's loss is nan
        loss, nll = label_smoothed_loss(logits, target, eps, pad_id)
        return (loss * float("nan"), nll) if next(calls) == 2 else (loss, nll)

    model, update, micro = _setup(poisoned)
    for seed in (1, 2):
        assert update(micro, micro[0].tokens, [seed]).finite
    before = _snapshot(model, update)
    out = update(micro, micro[0].tokens, [3])
    assert not out.finite and out.loss != out.loss  # nan, as read
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(model, update), strict=True))
    assert update(micro, micro[0].tokens, [4]).finite
    moved = [(a - b).abs().max().item() for a, b in zip(before, _snapshot(model, update), strict=True)]
    assert max(moved) > 1e-3  # the next, finite update moves them (so the equality above can fail)


def test_an_update_reads_the_device_once_after_staging_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled step, as a GPU runs it (~15 s to compile tiny here): the eager model's own
    reads (its id checks, whether the source has padding) are not in its graph. Without dropout,
    whose CPU kernel draws its seed from the host's generator (a host value, not the device's)."""
    model, update, micro = _setup(p_drop=0.0)
    update.net, update.loss_fn = compile_model(model), make_loss(compile=True)
    update(micro, micro[0].tokens, [1])  # compiles
    events: list[str] = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            events.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    out = update(micro, micro[0].tokens, [2], then=lambda: events.append("then") or "staged")
    monkeypatch.undo()
    assert events == ["then", "tolist"] and out.then == "staged" and out.finite


def test_the_outcome_is_the_loss_the_eager_step_computes() -> None:
    """The sums on the device are the loss function's own values (float64 sums of fp32 terms),
    read before Adam moved the weights. (With a gradient to take, as the update takes it: on a
    CPU that is attnlab's one-pass loss, equal to `label_smoothed_loss` only to rounding.)"""
    model, update, micro = _setup(p_drop=0.0)  # no dropout: the same values twice
    batch = micro[0]
    loss, nll = (x.detach() for x in update.loss_fn(model(batch.src, batch.tgt_in, batch.scored), batch.target, 0.1, 0))
    assert (loss.item(), nll.item()) == pytest.approx(
        [x.item() for x in label_smoothed_loss(model(batch.src, batch.tgt_in, batch.scored), batch.target, 0.1, 0)],
        rel=1e-6,
    )
    out = update(micro, batch.tokens, [1])
    assert (out.loss, out.nll) == (float(loss), float(nll))


def test_the_gradient_is_of_the_loss_per_target_token_of_the_whole_update() -> None:
    """§5.1 batches by tokens: an update's gradient is of Σ loss / (the update's target tokens), its
    micro-batches' summed, not each averaged on its own. Adam hardly sees a constant factor, so the
    gradient norm the update reports pins it (dividing by one token more passed every other test)."""
    model, update, micro = _setup(p_drop=0.0)  # no dropout: the same gradient every time
    batch = micro[0]
    reference = copy.deepcopy(model)
    loss, _ = label_smoothed_loss(reference(batch.src, batch.tgt_in, batch.scored), batch.target, 0.1, 0)
    (loss / batch.tokens).backward()
    expected = float(torch.nn.utils.get_total_norm([p.grad for p in reference.parameters() if p.grad is not None]))
    assert update(micro, batch.tokens, [1]).norm == pytest.approx(expected, rel=1e-5)
    model.load_state_dict(reference.state_dict())  # undo that update's step
    # the batch twice, as two micro-batches of one update of twice the tokens: the same gradient
    assert update(micro * 2, 2 * batch.tokens, [1, 2]).norm == pytest.approx(expected, rel=1e-5)


def test_the_optimizer_is_the_papers_adam() -> None:
    """§5.3: Adam with β1 = 0.9, β2 = 0.98 and ε = 10⁻⁹, no weight decay; Eq. (3) sets the
    learning rate each step, so it starts at 0. (β2 0.99 passed every other test.)"""
    optimizer = make_optimizer(Transformer(preset("tiny")))
    assert type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    assert group["weight_decay"] == 0 and group["lr"] == 0.0 and not group["amsgrad"]
