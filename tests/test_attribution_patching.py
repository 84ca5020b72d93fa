"""Attribution patching (`method="attribution"` of `attnlab.record.patching`, `.residual`,
`attnlab.decode.patching` and `attnlab heads patch --method`): each estimate is the derivative
of the real patch at no patch (checked by finite differences, for heads and for the residual
stream, where a gradient that stopped at a later site would be 0), it finds the heads the real
patching finds where the model is near linear, it leaves the weights' gradients alone, and what
cannot be differentiated is refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.patching import _ids, corpus_patching, patch_heads, patch_residual
from attnlab.errors import AttnlabError
from attnlab.record.importance import token_log_probs
from attnlab.record.patching import HEADS, kept_run
from attnlab.record.recorder import hook_point
from attnlab.record.residual import STATE_SITES
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
CLEAN = "A man is riding a horse on the beach."
CORRUPTED = "A woman is riding a horse on the beach."
EPSILON = 3e-3  # the gate's step for central differences: error O(ε²) from the curvature, ~1e-5 / ε from fp32


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def ids(model: Model) -> tuple[list[int], ...]:
    return _ids(model, CLEAN, CORRUPTED, None, False)


def slope(model: Model, sites, src: list[int], target: list[int], key, index: int, outputs: torch.Tensor) -> float:
    """d log P(target | src) / d gate of one site at 0, by central differences: the real patch of
    (key, index) toward `outputs`, a step of ±ε along it."""
    net = model.model
    tensors = (torch.tensor([src]), torch.tensor([[net.config.bos_id, *target[:-1]]]), torch.tensor([target]))
    values = []
    for step in (EPSILON, -EPSILON):
        gate = torch.zeros(1, outputs.size(1))
        gate[0, index] = step
        with torch.no_grad(), sites.attach({key: (gate, outputs)}):
            values.append(float(token_log_probs(net, *tensors).sum()))
    return (values[0] - values[1]) / (2 * EPSILON)


def test_each_head_estimate_is_the_derivative_of_its_patch(model: Model, ids) -> None:
    """Denoising estimates a head's patch into the corrupted run as the slope of the log-probability
    along it; the slope, measured, is the estimate. Heads low in the decoder reach the output
    through the heads above them too: a gradient that stopped at them would be far off."""
    clean, corrupted, target = ids
    estimate = patch_heads(model, CLEAN, CORRUPTED, method="attribution")
    assert estimate.method == "attribution" and np.isfinite(estimate.share).all()
    with torch.no_grad():
        _, kept = kept_run(model.model, clean, target, list(range(len(target))), torch.device("cpu"), HEADS)
    checked = 0
    for module in model.model.attention_modules():
        kind, layer = hook_point(module)
        if (kind, layer) not in (("cross", 0), ("cross", 1), ("encoder", 0)):
            continue
        for head in range(model.config.n_heads):
            measured = slope(model, HEADS, corrupted, target, module, head, kept[module])
            got = estimate.nats[KINDS.index(kind), layer, head]
            assert got == pytest.approx(measured, rel=0.03, abs=5e-3), (kind, layer, head)
            checked += abs(measured) > 0.1
    assert checked >= 4  # (slopes that are not all ~0: the comparison has something to compare)


def test_each_residual_estimate_is_the_derivative_of_its_patch(model: Model, ids) -> None:
    """The same for the residual stream: the changed word's embedding, each encoder layer's output
    there, and each decoder layer's at the first output piece. Every site above them is attached
    too, so a gradient cut at the next site (a patch with gate 1 would cut it) gives 0 here."""
    clean, corrupted, target = ids
    estimate = patch_residual(model, CLEAN, CORRUPTED, method="attribution")
    changed = estimate.source.index("▁man")
    with torch.no_grad():
        _, kept = kept_run(model.model, clean, target, list(range(len(target))), torch.device("cpu"), STATE_SITES)
    layers = model.config.n_layers
    for side, layer, position, grid in [("encoder", i, changed, estimate.encoder) for i in range(layers + 1)] + [
        ("decoder", i, 0, estimate.decoder) for i in range(1, layers + 1)
    ]:
        measured = slope(model, STATE_SITES, corrupted, target, (side, layer), position, kept[(side, layer)])
        difference = estimate.clean - estimate.corrupted
        got = grid[layer if side == "encoder" else layer - 1, position] * difference
        assert abs(measured) > 0.1 and got == pytest.approx(measured, rel=0.03), (side, layer)


def test_a_callers_inference_mode_gives_the_same_estimates(model: Model) -> None:
    """Under a notebook's `torch.inference_mode()` the backward pass was autograd's "element 0 of
    tensors does not require grad", for heads and for the residual stream."""
    with torch.inference_mode():
        heads = patch_heads(model, CLEAN, CORRUPTED, method="attribution")
        residual = patch_residual(model, CLEAN, CORRUPTED, method="attribution")
    assert np.array_equal(heads.share, patch_heads(model, CLEAN, CORRUPTED, method="attribution").share, equal_nan=True)
    assert np.array_equal(residual.decoder, patch_residual(model, CLEAN, CORRUPTED, method="attribution").decoder)


def test_it_finds_the_heads_patching_finds_where_the_model_is_near_linear(model: Model) -> None:
    """Denoising a changed noun, the estimate ranks the heads as the patched runs do (over 100
    test2016 pairs, Pearson 0.99: docs/EXPERIMENTS.md); noising is where it fails, as the clean
    run is near certain and its gradient near 0. Neither leaves a gradient on the weights."""
    patched = patch_heads(model, CLEAN, CORRUPTED)
    estimate = patch_heads(model, CLEAN, CORRUPTED, method="attribution")
    assert np.corrcoef(patched.share.ravel(), estimate.share.ravel())[0, 1] > 0.9
    assert set(estimate.order()[:2]) <= set(patched.order()[:3])
    assert np.abs(estimate.share[KINDS.index("decoder"), 0]).max() < 1e-6  # they read the target only: no change
    assert all(p.grad is None for p in model.model.parameters()) and not model.model.training


def test_a_corpus_and_the_command_take_the_method(model: Model, tmp_path: Path, capsys) -> None:
    """`corpus_patching` averages estimates, and `attnlab heads patch --method attribution` says
    in its table and its JSON that they are estimates."""
    pairs = corpus_patching(model, [CLEAN, CLEAN], [CORRUPTED, CORRUPTED], method="attribution")
    single = patch_heads(model, CLEAN, CORRUPTED, method="attribution")
    assert pairs.method == "attribution" and pairs.pairs == 2
    np.testing.assert_allclose(pairs.share, single.share, atol=1e-5)
    from attnlab.cli import main

    argv = ["heads", "patch", "--checkpoint", str(CHECKPOINT), "--clean", CLEAN, "--corrupted", CORRUPTED]
    assert main([*argv, "--method", "attribution", "--residual"]) == 0
    assert "(denoise, estimated from one gradient (attribution))" in capsys.readouterr().out.splitlines()[1]
    assert main([*argv, "--method", "attribution", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "attribution" and len(report["heads"]) == 36


def test_what_cannot_be_differentiated_is_refused_in_one_line(model: Model) -> None:
    """An int8 model has no gradient to take; a method patching does not have is named; a corpus
    refuses both before it translates a line."""
    int8 = load(CHECKPOINT, dtype="int8")
    with pytest.raises(AttnlabError, match="^attribution patching differentiates through the model: .* not int8$"):
        patch_heads(int8, CLEAN, CORRUPTED, method="attribution")
    with pytest.raises(AttnlabError, match="^patching's method is activation or attribution, not 'gradient'$"):
        patch_residual(model, CLEAN, CORRUPTED, method="gradient")
    with pytest.raises(AttnlabError, match="not int8"):
        corpus_patching(int8, [" ".join(["word"] * 1200)], [CLEAN], method="attribution")
