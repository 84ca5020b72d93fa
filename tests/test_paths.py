"""Path patching (`attnlab.record.paths`, `attnlab heads patch --paths`): each head's direct share
and its effect through each later component equal the same runs made with plain PyTorch hooks (on
W^O's input and the feed-forward layers' outputs, not the hook points the library uses); an
encoder head has no direct path; the first-order sum rule holds; bad input is one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.patching import corpus_paths, patch_paths
from attnlab.errors import AttnlabError
from attnlab.record.importance import token_log_probs
from attnlab.record.paths import trace_path_patching
from attnlab.record.recorder import hook_point
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
CLEAN = "A man is sleeping on a bench."
CORRUPTED = "A woman is sleeping on a bench."  # as many pieces: encoder heads are patched too


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def pair(model: Model) -> tuple[list[int], list[int], list[int]]:
    target = model.encode_target(model.translate(CLEAN))[0]
    return model.encode_source(CLEAN)[0], model.encode_source(CORRUPTED)[0], [*target, model.config.eos_id]


@contextmanager
def plain_hooks(net, heads: dict, ffns: dict) -> Iterator[tuple[dict, dict]]:
    """Forward hooks of PyTorch's own: each attention module's W^O input (the heads' outputs side
    by side) and each feed-forward layer's output, seen (before any change) and replaced where
    `heads` ({module: {head: (L, d_v) value}}) and `ffns` ({module: value}) say."""
    seen_heads, seen_ffns, handles = {}, {}, []
    d_v = net.config.d_model // net.config.n_heads

    def w_o(module, args):
        x = args[0]
        seen_heads[module] = x.detach().clone()
        x = x.clone()
        for head, value in heads.get(module, {}).items():
            x[0, :, head * d_v : (head + 1) * d_v] = value
        return (x,)

    def ffn(module, args, output):
        seen_ffns[module] = output.detach().clone()
        return ffns.get(module)

    for module in net.attention_modules():
        handles.append(module.w_o.register_forward_pre_hook(lambda m, a, owner=module: w_o(owner, a)))
    for side in (net.encoder, net.decoder):
        for layer in side["layers"]:
            handles.append(layer.ffn.register_forward_hook(ffn))
    try:
        yield seen_heads, seen_ffns
    finally:
        for handle in handles:
            handle.remove()


def logp(net, src: list[int], target: list[int], heads: dict | None = None, ffns: dict | None = None):
    """Σ log P(target | src) with plain hooks, and what every head and feed-forward layer computed."""
    tensors = (torch.tensor([src]), torch.tensor([[net.config.bos_id, *target[:-1]]]), torch.tensor([target]))
    with torch.no_grad(), plain_hooks(net, heads or {}, ffns or {}) as (seen_heads, seen_ffns):
        value = float(token_log_probs(net, *tensors).sum())
    return value, seen_heads, seen_ffns


def frozen_at(net, base_heads: dict, base_ffns: dict) -> tuple[dict, dict]:
    """Every head and feed-forward layer held at a run's values."""
    d_v = net.config.d_model // net.config.n_heads
    heads = {
        m: {h: base_heads[m][0, :, h * d_v : (h + 1) * d_v] for h in range(net.config.n_heads)}
        for m in net.attention_modules()
    }
    return heads, dict(base_ffns)


def test_direct_and_through_shares_equal_the_runs_made_by_hand(model: Model, pair) -> None:
    """Denoising: the corrupted run with everything frozen and one head given the clean value
    (direct), then the corrupted run with one receiver given what it computed in that run
    (through). A freeze that missed the feed-forward layers, or a receiver patched with the base
    value, moves these by 0.05-0.3 of the difference; they agree here to 1e-5."""
    net = model.model.eval()
    clean, corrupted, target = pair
    paths = patch_paths(model, CLEAN, CORRUPTED, sender=("cross", 1, 1))
    clean_logp, clean_heads, _ = logp(net, clean, target)
    base_logp, base_heads, base_ffns = logp(net, corrupted, target)
    difference = clean_logp - base_logp
    d_v = net.config.d_model // net.config.n_heads
    for kind, layer, head in [("cross", 1, 1), ("decoder", 1, 3), ("cross", 2, 0), ("encoder", 1, 2)]:
        module = next(m for m in net.attention_modules() if hook_point(m) == (kind, layer))
        heads, ffns = frozen_at(net, base_heads, base_ffns)
        heads[module][head] = clean_heads[module][0, :, head * d_v : (head + 1) * d_v]
        direct, heard_heads, heard_ffns = logp(net, corrupted, target, heads, ffns)
        expected = (direct - base_logp) / difference
        assert paths.direct.share[KINDS.index(kind), layer, head] == pytest.approx(expected, abs=1e-5)
        if (kind, layer, head) != paths.sender:
            continue
        receivers = [m for m in net.attention_modules() if hook_point(m) in (("decoder", 2), ("cross", 2))]
        for receiver in receivers:
            for h in range(net.config.n_heads):
                value = heard_heads[receiver][0, :, h * d_v : (h + 1) * d_v]
                through = (logp(net, corrupted, target, {receiver: {h: value}})[0] - base_logp) / difference
                at = (KINDS.index(hook_point(receiver)[0]), hook_point(receiver)[1], h)
                assert paths.receivers.share[at] == pytest.approx(through, abs=1e-5)
        for layer_index, layer_module in enumerate(net.decoder["layers"]):
            if layer_index >= 1:
                ffn = layer_module.ffn
                through = (logp(net, corrupted, target, ffns={ffn: heard_ffns[ffn]})[0] - base_logp) / difference
                assert paths.ffn[1, layer_index] == pytest.approx(through, abs=1e-5)
    assert abs(paths.ffn[1, 1]) > 0.05  # (what a wrong freeze would move)


def test_an_encoder_head_has_no_direct_path(model: Model) -> None:
    """The decoder reads the encoder only through the cross heads: frozen, they leave an encoder
    head's change nowhere to go, so its direct share is 0 (to rounding) while its total is not; its
    receivers are later encoder sub-layers and every cross head, none of the decoder's own."""
    paths = patch_paths(model, CLEAN, CORRUPTED, positions=[1], sender=("encoder", 0, 3))
    assert "encoder" in paths.total.patched
    assert np.abs(paths.direct.share[0]).max() < 1e-6
    assert np.abs(paths.total.share[0]).max() > 0.1
    assert np.abs(paths.direct.share[2]).max() > 0.1  # cross heads do write to the output directly
    receivers = paths.receivers.share
    assert np.isnan(receivers[0, 0]).all() and np.isfinite(receivers[0, 1:]).all()  # later encoder layers
    assert np.isnan(receivers[1]).all() and np.isfinite(receivers[2]).all()  # no decoder self head; every cross head
    assert np.isfinite(paths.ffn[0]).all() and np.isnan(paths.ffn[1]).all()


def test_a_top_head_reaches_the_output_directly_or_through_the_last_feed_forward_layer(model: Model) -> None:
    """Above a top-layer cross head there is only the top feed-forward layer: it is the one
    receiver, and the indirect share is what goes through it (and its interaction with the rest)."""
    paths = patch_paths(model, CLEAN, CORRUPTED, positions=[1], sender=("cross", 2, 1))
    assert np.isnan(paths.receivers.share).all()
    assert np.isnan(paths.ffn[0]).all() and np.isnan(paths.ffn[1, :2]).all() and np.isfinite(paths.ffn[1, 2])
    at = (KINDS.index("cross"), 2, 1)
    assert paths.indirect.share[at] == pytest.approx(paths.total.share[at] - paths.direct.share[at])
    assert paths.rest == pytest.approx(paths.indirect.share[at] - paths.ffn[1, 2], abs=1e-6)  # (fp32 rounding: 3e-7)
    assert [node for node, _ in paths.through()] == [("ffn", "decoder", 2)]


def test_a_trace_is_split_on_its_output_with_its_heads_off(model: Model) -> None:
    """A head switched off when the trace was recorded stays off: it carries nothing by any path."""
    from attnlab.record.ablation import ablate

    with ablate(model, {("cross", 1): [1]}):
        trace = model.translate(CLEAN, record=True).trace
    paths = trace_path_patching(model, trace, CORRUPTED, positions=[1], sender=("cross", 0, 1))
    for part in (paths.total, paths.direct, paths.receivers):
        assert abs(part.share[2, 1, 1]) < 1e-6  # (rounding: a share is ~1e-7 from 0 where nothing moves)
    assert np.abs(paths.total.share[2, 1]).max() > 0.05  # (the module's other heads do move it)
    assert paths.total.pieces == list(trace.tgt_tokens)


def test_a_corpus_mean_is_the_mean_of_its_pairs(model: Model) -> None:
    lines = [CLEAN, "Two dogs play in the snow."]
    changed = [CORRUPTED, "Two cats play in the snow."]
    mean = corpus_paths(model, lines, changed)
    each = [patch_paths(model, c, k) for c, k in zip(lines, changed, strict=True)]
    assert mean.total.pairs == mean.direct.pairs == 2
    for part in ("total", "direct"):  # decoder heads over both pairs; encoder heads over the pairs of one length
        shares = [getattr(p, part).share for p in each]
        np.testing.assert_allclose(getattr(mean, part).share[1:], np.mean([s[1:] for s in shares], 0), atol=1e-6)
        whole = [s[0] for s in shares if np.isfinite(s[0]).all()]
        np.testing.assert_allclose(getattr(mean, part).share[0], np.mean(whole, 0), atol=1e-6)


def test_refusals_are_one_line(model: Model) -> None:
    with pytest.raises(AttnlabError, match="method is activation"):
        patch_paths(model, CLEAN, CORRUPTED, method="attribution")
    with pytest.raises(AttnlabError, match="not a patched head"):
        patch_paths(model, CLEAN, "A young woman is sleeping on a bench.", sender=("encoder", 0, 0))
    with pytest.raises(AttnlabError, match="not a patched head"):
        patch_paths(model, CLEAN, CORRUPTED, sender=("cross", 7, 0))
    with pytest.raises(AttnlabError, match="no difference"):
        patch_paths(model, CLEAN, CLEAN)


@pytest.mark.parametrize(
    "sender",
    [("cross", 1), ("ffn", "cross", 1), ("cross", True, 1), ("ffn", "decoder", 1.0), ["cross", 1, 1], "cross L1 H1"],
)
def test_a_malformed_sender_is_one_line_that_says_what_a_sender_is(model: Model, sender: object) -> None:
    """("cross", 1) was an IndexError while the refusal was written, ("ffn", "cross", 1) tuple.index's
    ValueError, and ("cross", True, 1) was read as layer 1 (True == 1), though a bool is no layer elsewhere."""
    trace = model.translate("A dog runs.", record=True).trace
    with pytest.raises(AttnlabError) as info:
        trace_path_patching(model, trace, "A woman runs.", sender=sender)
    assert str(info.value) == (
        'a sender is a head (kind, layer, head), kind "encoder", "decoder" or "cross", or a feed-forward layer '
        f'("ffn", side, layer), side "encoder" or "decoder"; got {sender!r}'
    )


def test_the_command_prints_the_split_and_json(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "attnlab", "heads", "patch", "--checkpoint", str(CHECKPOINT)]
    command += ["--clean", CLEAN, "--corrupted", CORRUPTED, "--positions", "1", "--paths"]
    done = subprocess.run([*command, "--sender", "cross:1:1"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "direct" in done.stdout and "decoder FFN L1" in done.stdout and "rest" in done.stdout
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, cwd=ROOT)
    answer = json.loads(done.stdout)
    top = answer["sender"]
    row = next(r for r in answer["heads"] if [r["kind"], r["layer"], r["head"]] == top)
    assert row["total"] == pytest.approx(row["direct"] + row["indirect"])
    assert answer["through"] and answer["through"][0][0]
    done = subprocess.run([*command, "--sender", "ffn:decoder:1", "--json"], capture_output=True, text=True, cwd=ROOT)
    answer = json.loads(done.stdout)
    assert answer["sender"] == ["ffn", "decoder", 1] and answer["through"][0][0] in ("decoder FFN L2", "decoder L2 H1")
    assert answer["rest"] == pytest.approx(
        answer["sender_total"] - answer["sender_direct"] - sum(v for _, v in answer["through"])
    )
    refused = subprocess.run([*command, "--sender", "cross:1"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "--sender" in refused.stderr


def test_the_feed_forward_hooks_change_nothing_for_another_thread(model: Model) -> None:
    """Path patching leaves a forward hook on every feed-forward layer; while one thread has them
    holding outputs at zero, another thread's pass (a server's other session) gives the same
    logits as a model without hooks, bit for bit, and so does a pass after the call."""
    import threading

    from attnlab.model.hooks import attached
    from attnlab.record.paths import FFN_OUTPUTS

    fresh = load(CHECKPOINT)
    net = fresh.model.eval()
    src, tgt = torch.tensor([fresh.encode_source(CLEAN)[0]]), torch.tensor([[2, 5, 6, 7]])
    with torch.no_grad():
        before = net(src, tgt)
        patch_paths(fresh, CLEAN, CORRUPTED)
        assert len(net.decoder["layers"][0].ffn._forward_hooks) == 1
        assert torch.equal(net(src, tgt), before)
        seen = {}
        zeroed = {layer.ffn: torch.zeros_like for side in (net.encoder, net.decoder) for layer in side["layers"]}
        with attached(FFN_OUTPUTS, zeroed):
            worker = threading.Thread(target=lambda: seen.setdefault("logits", torch.no_grad()(net)(src, tgt)))
            worker.start()
            worker.join()
            assert not torch.equal(net(src, tgt), before)  # (what the thread would see if it leaked)
    assert torch.equal(seen["logits"], before)


def test_a_feed_forward_sender_equals_the_runs_made_by_hand(model: Model, pair) -> None:
    """A feed-forward layer as the sender ("ffn", side, layer): its direct share is the corrupted
    run with everything frozen and that layer given the clean output, its path through a later
    head the corrupted run with that head given what it computed there, and its total the
    corrupted run with that layer alone given the clean output; for a head sender the total is its
    cell of the head patching grid."""
    net = model.model.eval()
    clean, corrupted, target = pair
    paths = patch_paths(model, CLEAN, CORRUPTED, sender=("ffn", "decoder", 1))
    clean_logp, _, clean_ffns = logp(net, clean, target)
    base_logp, base_heads, base_ffns = logp(net, corrupted, target)
    difference = clean_logp - base_logp
    ffn = net.decoder["layers"][1].ffn
    heads, ffns = frozen_at(net, base_heads, base_ffns)
    ffns[ffn] = clean_ffns[ffn]
    direct, heard_heads, _ = logp(net, corrupted, target, heads, ffns)
    assert paths.sender_direct == pytest.approx((direct - base_logp) / difference, abs=1e-5)
    total = logp(net, corrupted, target, ffns={ffn: clean_ffns[ffn]})[0]
    assert paths.sender_total == pytest.approx((total - base_logp) / difference, abs=1e-5)
    assert abs(paths.sender_total) > 0.05 and abs(paths.sender_total - paths.sender_direct) > 0.01
    d_v = net.config.d_model // net.config.n_heads
    receiver = net.decoder["layers"][2].self_attn
    value = heard_heads[receiver][0, :, 1 * d_v : 2 * d_v]
    through = (logp(net, corrupted, target, {receiver: {1: value}})[0] - base_logp) / difference
    assert paths.receivers.share[KINDS.index("decoder"), 2, 1] == pytest.approx(through, abs=1e-5)
    assert np.isnan(paths.receivers.share[:, :2]).all() and np.isnan(paths.ffn[1, :2]).all()  # nothing below it
    head = patch_paths(model, CLEAN, CORRUPTED, sender=("cross", 1, 1))
    assert head.sender_total == pytest.approx(head.total.share[2, 1, 1], abs=1e-5)
    with pytest.raises(AttnlabError, match="not a patched head or feed-forward layer"):
        patch_paths(model, CLEAN, "A young woman is sleeping on a bench.", sender=("ffn", "encoder", 0))
