"""Activation patching of heads (`attnlab.record.patching`, `attnlab.decode.patching`, `attnlab
heads patch`): a patch replaces exactly the head's output, every row of a batch patches its own
head, heads that cannot see the change move nothing, encoder heads wait for sources of one length,
a corpus mean is the mean of its pairs, and bad input is one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.decode.patching import corpus_patching, corpus_residual, patch_heads, patch_residual
from attnlab.errors import AttnlabError
from attnlab.model.hooks import HEAD_PATCHES, attached
from attnlab.record.importance import token_log_probs
from attnlab.record.patching import HEADS, NoDifference, kept_run, trace_patching
from attnlab.record.recorder import hook_point
from attnlab.record.residual import trace_residual_patching
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "checkpoints" / "multi30k-en-de"
CLEAN = "A man is riding a horse on the beach."
CORRUPTED = "A woman is riding a horse on the beach."  # as many pieces: every head can be patched
LONGER = "A young woman is riding a horse on the beach."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.fixture(scope="module")
def patched(model: Model):
    return patch_heads(model, CLEAN, CORRUPTED)


def ids(model: Model, *texts: str) -> list[list[int]]:
    return [model.encode_source(t)[0] for t in texts]


def run_with(model: Model, src: list[int], target: list[int], patches: dict) -> float:
    """log P(target | src) with some modules' outputs patched ({module: (gate (1, h), outputs)})."""
    net = model.model
    tensors = (torch.tensor([src]), torch.tensor([[net.config.bos_id, *target[:-1]]]), torch.tensor([target]))
    with torch.no_grad(), attached(HEAD_PATCHES, patches):
        return float(token_log_probs(net, *tensors).sum())


def test_patching_every_cross_head_gives_the_other_runs_output(model: Model, patched) -> None:
    """The decoder sees the source only through encoder-decoder attention: with every cross head's
    output copied from the clean run, the corrupted run's log-probability is the clean one's (and
    back). A patch that missed the output, or blended it, would leave most of the 9-nat gap."""
    clean, corrupted = ids(model, CLEAN, CORRUPTED)
    target = model.encode_target(model.translate(CLEAN))[0] + [model.config.eos_id]
    assert patched.clean - patched.corrupted > 5
    ones = torch.ones(1, model.config.n_heads)
    cross = [m for m in model.model.attention_modules() if hook_point(m)[0] == "cross"]
    for into, outputs_of, expected in ((corrupted, clean, patched.clean), (clean, corrupted, patched.corrupted)):
        with torch.no_grad():
            _, kept = kept_run(model.model, outputs_of, target, list(range(len(target))), torch.device("cpu"), HEADS)
        got = run_with(model, into, target, {m: (ones, kept[m]) for m in cross})
        assert got == pytest.approx(expected, abs=1e-3)


def test_heads_that_cannot_see_the_change_move_nothing(patched) -> None:
    """Decoder self-attention in the first layer reads only the target, the same in both runs:
    its heads' outputs are equal, and patching them moves nothing. Heads higher up do move it."""
    decoder = KINDS.index("decoder")
    assert np.abs(patched.share[decoder, 0]).max() < 1e-4
    assert patched.order()[0][0] == "cross" and patched.share.max() > 0.3  # the top cross heads restore most
    assert np.isfinite(patched.share).all() and patched.patched == KINDS


def test_each_row_patches_its_own_head(model: Model, patched) -> None:
    """A batch of rows, one head each, gives what patching that head alone in a run of its own gives."""
    clean, corrupted = ids(model, CLEAN, CORRUPTED)
    target = model.encode_target(model.translate(CLEAN))[0] + [model.config.eos_id]
    with torch.no_grad():
        _, kept = kept_run(model.model, clean, target, list(range(len(target))), torch.device("cpu"), HEADS)
    modules = {hook_point(m): m for m in model.model.attention_modules()}
    for kind, layer, head in [("cross", 2, 3), ("encoder", 0, 0), ("decoder", 2, 1)]:
        gate = torch.zeros(1, model.config.n_heads)
        gate[0, head] = 1.0
        module = modules[(kind, layer)]
        alone = run_with(model, corrupted, target, {module: (gate, kept[module])}) - patched.corrupted
        assert patched.nats[KINDS.index(kind), layer, head] == pytest.approx(alone, abs=1e-3), (kind, layer, head)


def test_encoder_heads_wait_for_sources_of_one_length(model: Model) -> None:
    """Encoder heads sit at source positions: with a longer corrupted source they are not patched
    (NaN, None in rows, absent from the order), and the decoder's heads still are."""
    result = patch_heads(model, CLEAN, LONGER)
    assert result.patched == ("decoder", "cross")
    assert np.isnan(result.share[0]).all() and np.isfinite(result.share[1:]).all()
    assert all(kind != "encoder" for kind, _, _ in result.order()) and len(result.order()) == 24
    assert {r["share"] is None for r in result.rows() if r["kind"] == "encoder"} == {True}


def test_positions_and_directions(model: Model, patched) -> None:
    """`positions` sums the log-probability over those target pieces only (the translation's own
    per-piece log-probabilities), and noising measures the damage each head alone does."""
    out = model.translate(CLEAN, beam=1)
    one = patch_heads(model, CLEAN, CORRUPTED, out, positions=[1, -1])
    assert one.positions == [1, len(out.tokens) - 1] and one.pieces == out.tokens
    assert one.clean == pytest.approx(out.token_logprobs[1] + out.token_logprobs[-1], abs=1e-3)
    n = len(out.tokens)  # a position past either end names both ways of counting (only 0 .. n-1 was said)
    with pytest.raises(
        AttnlabError, match=rf"^target position -99 does not exist: .* \(0 to {n - 1}, or from the end -1 to -{n}\)$"
    ):
        patch_heads(model, CLEAN, CORRUPTED, out, positions=[-99])
    noise = patch_heads(model, CLEAN, CORRUPTED, direction="noise")
    assert noise.clean == pytest.approx(patched.clean) and noise.direction == "noise"
    np.testing.assert_allclose(noise.share, -noise.nats / (noise.clean - noise.corrupted))
    assert not np.allclose(noise.share, patched.share, atol=0.05)


def test_a_trace_is_patched_on_its_output_with_its_heads_off(model: Model) -> None:
    """A head switched off when the trace was recorded is off in both runs: patching it moves nothing."""
    trace = model.translate(CLEAN, record=True, ablate_heads={("cross", 2): [3]}).trace
    result = trace_patching(model, trace, CORRUPTED)
    assert result.pieces == trace.tgt_tokens
    assert abs(result.share[KINDS.index("cross"), 2, 3]) < 1e-4  # (rounding: the batched rows run fused attention)
    assert result.share[KINDS.index("cross"), 1, 1] > 0.2


def test_a_corpus_mean_is_the_mean_of_its_pairs(model: Model, patched) -> None:
    """Each pair's share, then the mean; a pair whose change moves nothing is left out and counted;
    encoder heads are averaged over the pairs whose sources are as long (cats: one piece more)."""
    other = patch_heads(model, "Two dogs run through the snow.", "Two cats run through the snow.")
    clean = [CLEAN, "Two dogs run through the snow.", CLEAN]
    mean = corpus_patching(model, clean, [CORRUPTED, "Two cats run through the snow.", CLEAN])
    assert (mean.pairs, mean.skipped) == (2, 1)
    assert other.patched == ("decoder", "cross")
    expected = np.where(np.isnan(other.share), patched.share, (patched.share + other.share) / 2)
    np.testing.assert_allclose(mean.share, expected, atol=1e-5)


def test_refusals_are_one_line(model: Model) -> None:
    with pytest.raises(NoDifference, match="^the corrupted source changes .* by only"):
        patch_heads(model, CLEAN, CLEAN)
    with pytest.raises(AttnlabError, match="denoise or noise"):
        patch_heads(model, CLEAN, CORRUPTED, direction="up")
    for positions in ([40], ["1"], [], 3):
        with pytest.raises(AttnlabError, match="position"):
            patch_heads(model, CLEAN, CORRUPTED, positions=positions)
    with pytest.raises(AttnlabError, match="^patching needs a model from attnlab.load"):
        patch_heads(model.model, CLEAN, CORRUPTED)
    with pytest.raises(AttnlabError, match="as many corrupted lines"):
        corpus_patching(model, [CLEAN, CLEAN], [CORRUPTED])
    with pytest.raises(AttnlabError, match="^line 2: the input has 2400 pieces"):
        corpus_patching(model, [CLEAN, CLEAN], [CORRUPTED, " ".join(["word"] * 1200)])
    with pytest.raises(AttnlabError, match="nothing to patch"):
        corpus_patching(model, [CLEAN], [CLEAN])


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--limit", "3"], "--limit reads only the first N lines of files of pairs: give it with --files"),
        (["--files", "--limit", "0"], "--limit takes N ≥ 1 lines of the --files, got 0"),
        (["--sender", "cross:1:1"], "--sender names the head whose paths to split: give it with --paths"),
        (
            ["--paths", "--files", "--sender", "cross:1:1"],
            "--sender splits the paths of one pair: give one --clean and --corrupted, not --files",
        ),
        (
            ["--threshold", "0.1"],
            "--threshold is the smallest share a path of --circuit keeps: give it with --circuit N",
        ),
        (
            ["--paths", "--threshold", "0"],
            "--threshold is the smallest share a path of --circuit keeps: give it with --circuit N",
        ),
    ],
)
def test_the_command_names_what_an_option_lacks(given: list[str], said: str, capsys: pytest.CaptureFixture) -> None:
    """`--limit 3` without --files said "--limit takes N ≥ 1 lines ..., got 3"; `--sender` without
    --paths said "not --files" where no --files was given; a --threshold without --circuit was
    ignored (status 0). Each is one line naming what is wrong, status 2, before the model loads."""
    from attnlab.cli import main

    argv = ["heads", "patch", "--checkpoint", str(CHECKPOINT), "--clean", CLEAN, "--corrupted", CORRUPTED, *given]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"attnlab heads patch: error: {said}\n"


def test_the_command_prints_the_grids_and_json(tmp_path: Path) -> None:
    """`attnlab heads patch` end to end: the grids and the heads by share, JSON with --json, files
    of pairs with --files, and files of unequal length refused in one line."""
    command = [sys.executable, "-m", "attnlab", "heads", "patch", "--checkpoint", str(CHECKPOINT)]
    run = subprocess.run([*command, "--clean", CLEAN, "--corrupted", CORRUPTED], capture_output=True, text=True)
    lines = run.stdout.splitlines()
    assert run.returncode == 0 and lines[0].startswith("log P(target): clean -")
    assert lines[3] == "encoder\th0\th1\th2\th3" and lines[4].startswith("layer 2\t")
    assert lines[-37].split("\t") == ["kind", "layer", "head", "share", "nats"] and lines[-36].startswith("cross\t")
    clean, corrupted = tmp_path / "clean.en", tmp_path / "corrupted.en"
    clean.write_text(f"{CLEAN}\n{CLEAN}\n", encoding="utf-8")
    corrupted.write_text(f"{CORRUPTED}\n{LONGER}\n", encoding="utf-8")
    files = [*command, "--clean", str(clean), "--corrupted", str(corrupted), "--files", "--json"]
    report = json.loads(subprocess.run(files, capture_output=True, text=True, check=True).stdout)
    assert report["pairs"] == 2 and len(report["heads"]) == 36 and report["patched"] == list(KINDS)
    spread = subprocess.run([*files[:-1], "--residual"], capture_output=True, text=True, check=True)
    lines = spread.stdout.splitlines()  # pair 2 has a word more: nothing to line it up on
    assert lines[3] == "encoder\t-3\t-2\t-1\t+0\t+1\t+2\t+3" and lines[7].startswith("embeddings\t-\t")
    assert "1 pair patched" in spread.stderr and "1 not one changed piece: left out" in spread.stderr
    residual = subprocess.run(
        [*command, "--clean", CLEAN, "--corrupted", CORRUPTED, "--residual"], capture_output=True, text=True
    )
    lines = residual.stdout.splitlines()
    assert lines[3].startswith("encoder\t▁A\t▁man") and lines[7].startswith("embeddings\t0.00\t1.00")
    assert lines[9].startswith("decoder\t▁Ein\t▁Mann") and len(lines) == 13
    corrupted.write_text(f"{CORRUPTED}\n", encoding="utf-8")
    refused = subprocess.run(files, capture_output=True, text=True)
    assert (
        refused.returncode == 2 and refused.stderr.strip().count("\n") == 0 and "corrupted.en has 1" in refused.stderr
    )


# -- the residual stream: every layer's output at every position ----------------------------------------------
@pytest.fixture(scope="module")
def traced(model: Model):
    return patch_residual(model, CLEAN, CORRUPTED)


def test_the_changed_word_starts_at_its_own_position(traced) -> None:
    """Patching the embeddings at the changed position makes the two inputs one, so it moves the
    whole difference, in either direction; at any other position the embeddings are the same in
    both runs and move nothing."""
    changed = traced.source.index("▁man")
    assert traced.changed[changed] == "▁woman" and traced.encoder.shape == (4, len(traced.source))
    assert traced.encoder[0, changed] == pytest.approx(1, abs=1e-4)
    assert np.abs(np.delete(traced.encoder[0], changed)).max() < 1e-5
    assert traced.encoder[1:, changed].min() > 0.9  # (here the word stays where it was, layer after layer)


def test_the_top_decoder_layer_splits_the_difference_between_the_pieces(model: Model, traced) -> None:
    """The top layer's output at a position is read by that position's prediction only: its row
    of shares adds up to the whole difference, in either direction, with sources of any lengths."""
    assert traced.decoder.shape == (3, len(traced.target)) and traced.target[-1] == "</s>"
    assert traced.decoder[-1].sum() == pytest.approx(1, abs=1e-3)
    assert traced.decoder[-1, :2].sum() > 0.9  # Ein/Eine and Mann/Frau: where the change shows
    longer = patch_residual(model, CLEAN, LONGER, direction="noise")
    assert not longer.encoder_patched and np.isnan(longer.encoder).all()
    assert longer.decoder[-1].sum() == pytest.approx(1, abs=1e-3)


def test_the_hooks_change_nothing_for_anyone_else(model: Model, traced) -> None:
    """Residual patching leaves forward hooks on the model's layers; a pass with nothing attached
    (another caller's, another thread's) gives the same logits, bit for bit."""
    fresh = load(CHECKPOINT)
    src, tgt = torch.tensor([ids(fresh, CLEAN)[0]]), torch.tensor([[2, 5, 6, 7]])
    with torch.no_grad():
        before = fresh.model(src, tgt)
        patch_residual(fresh, CLEAN, CORRUPTED)
        assert len(fresh.model.decoder["layers"][0]._forward_hooks) == 1
        assert torch.equal(fresh.model(src, tgt), before)
    trace = model.translate(CLEAN, record=True).trace
    again = trace_residual_patching(model, trace, CORRUPTED)
    assert again.target == trace.tgt_tokens and again.source == trace.src_tokens
    np.testing.assert_allclose(again.decoder, traced.decoder, atol=1e-4)


def test_an_int8_model_is_patched_a_row_at_a_time(patched) -> None:
    """Patching takes no gradient, so an int8 model is patched too; its activations are quantized
    per tensor, so each patched row runs alone (in a batch, the rows' scales mixed: shares of 0.01
    where the change cannot reach). Its shares are the fp32 model's within int8's rounding."""
    int8 = load(CHECKPOINT, dtype="int8")
    heads = patch_heads(int8, CLEAN, CORRUPTED)
    np.testing.assert_allclose(heads.share, patched.share, atol=0.03)
    assert heads.order()[:2] == patched.order()[:2]
    layers = patch_residual(int8, CLEAN, CORRUPTED)
    assert layers.encoder[0, 1] == pytest.approx(1, abs=1e-3)  # the changed word's embedding: all of it
    assert np.abs(layers.encoder[0, 2:]).max() < 1e-3  # the same embeddings in both runs: nothing (0.015 batched)


def test_a_corpus_lines_the_residual_stream_up_on_the_changed_piece(model: Model, traced) -> None:
    """Over pairs that differ in one piece, each encoder row is the mean share at each distance from
    it (a pair counts where it reaches), and the output pieces the change lands on are counted;
    pairs that differ in more than one piece cannot be lined up and are counted as left out."""
    dogs = patch_residual(model, "Two dogs run through the snow .", "Two cats run through the snow .")
    two = "A woman is riding a dog on the beach."  # two pieces changed, as many pieces
    assert len(model.encode_source(two)[0]) == len(model.encode_source(CLEAN)[0])
    clean = [CLEAN, "Two dogs run through the snow .", CLEAN, CLEAN]
    spread = corpus_residual(model, clean, [CORRUPTED, "Two cats run through the snow .", LONGER, two], reach=2)
    assert (spread.pairs, spread.skipped, spread.left_out) == (1, 0, 3) and spread.offsets == [-2, -1, 0, 1, 2]
    changed = traced.source.index("▁man")  # the one pair lined up: the encoder's rows around its changed piece
    expected = np.full((4, 5), np.nan)
    expected[:, 1:] = traced.encoder[:, changed - 1 : changed + 3]  # (nothing two pieces before "man")
    np.testing.assert_allclose(spread.encoder, expected, atol=1e-6)
    assert dict(spread.landed) == {"▁Ein": 1, "▁Mann": 1}
    assert not dogs.encoder_patched  # ("cats": a piece more, as LONGER: both left out)
    with pytest.raises(AttnlabError, match="exactly one piece"):
        corpus_residual(model, [CLEAN], [LONGER])
    with pytest.raises(AttnlabError, match="reach is a whole number"):
        corpus_residual(model, [CLEAN], [CORRUPTED], reach=-1)
