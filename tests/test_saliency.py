"""Gradient saliency (`attnlab.record.saliency`, gradient × input): each score must be the
derivative of the output's probability along its input's own embedding row, read with the
trace's heads off again, and read as word alignment (`align --method saliency`)."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from attnlab import load
from attnlab.decode.alignment import attention_rows, trace_links
from attnlab.decode.readings import candidates
from attnlab.errors import AttnlabError
from attnlab.record.saliency import saliency
from attnlab.record.trace import AttentionTrace

saliency_module = importlib.import_module("attnlab.record.saliency")  # (the package names the function so)
CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
PAIR = ("Two dogs run across the grass .", "Zwei Hunde rennen über das Gras .")


@pytest.fixture(scope="module")
def model() -> object:
    return load(CHECKPOINTS / "multi30k-en-de")


@pytest.fixture(scope="module")
def trace(model: object) -> AttentionTrace:
    return model.score(*PAIR, record=True).trace


def test_each_score_is_the_probabilitys_derivative_along_its_own_row(model: object, trace: AttentionTrace) -> None:
    """(p(y_t | e_j(1+ε)) − p(y_t | e_j(1−ε)))/2ε is ∂p/∂e_j · e_j: checked in float64 against central
    differences for every source and decoder-input piece of three output pieces, which fails with the
    log-probability's gradient (1/p off) or with another position's."""
    double = copy.deepcopy(model)
    double.model.double()
    found = saliency(double, trace)
    net = double.model
    src = torch.tensor([[double.tokenizer.piece_to_id(p) for p in trace.src_tokens]])
    produced = [double.target_tokenizer.piece_to_id(p) for p in trace.tgt_tokens]
    tgt = torch.tensor([[net.config.bos_id, *produced[:-1]]])
    with torch.no_grad():
        rows = [net.embed(src), net.target_embedding(tgt)]

    def probability(t: int, side: int, j: int, scale: float) -> float:
        moved = [row.clone() for row in rows]
        moved[side][0, j] *= scale
        with torch.no_grad():
            hidden = net.decode(tgt, net.encode(src, None, rows=moved[0]), None, rows=moved[1])
            return torch.softmax(net.logits(hidden[0, t]), -1)[produced[t]].item()

    eps = 1e-7  # (small: a ReLU of the feed-forward layers can turn within 1e-5 of a row)
    for t in (1, 2, 5):
        for side, scores in enumerate((found.source_scores, found.target_scores)):
            for j in range(scores.shape[1]):
                expected = (probability(t, side, j, 1 + eps) - probability(t, side, j, 1 - eps)) / (2 * eps)
                assert scores[t, j] == pytest.approx(expected, rel=1e-4, abs=1e-7), (t, side, j)
    assert np.abs(found.source_scores[[1, 2, 5]]).max() > 0.01  # (a size the check can fail on)


def test_rows_read_in_passes_of_one_position_are_the_same(
    model: object, trace: AttentionTrace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output positions are read as copies of the pair in one batch; a batch of one position at a
    time gives the same scores (the copies do not see each other), and the decoder input after a
    row's own scores exactly 0."""
    whole = saliency(model, trace)
    monkeypatch.setattr(saliency_module, "BATCH_TOKENS", 1)
    single = saliency(model, trace)
    np.testing.assert_allclose(single.source_scores, whole.source_scores, atol=1e-6)
    np.testing.assert_allclose(single.target_scores, whole.target_scores, atol=1e-6)
    assert np.abs(whole.source_scores).min(1).max() > 0 and (np.triu(whole.target_scores, 1) == 0).all()
    rows, share = whole.source_rows(), whole.source_share()
    np.testing.assert_allclose(rows.sum(1), 1.0)
    assert ((share > 0) & (share < 1)).all()
    assert whole.source == trace.src_tokens and whole.produced == trace.tgt_tokens and whole.inputs[0] == "<s>"


def test_smoothgrad_averages_noisy_copies_from_a_seed(model: object, trace: AttentionTrace) -> None:
    """SmoothGrad: the same seed gives the same map, another seed another; with no noise the
    average of the copies is the plain gradient."""
    plain = saliency(model, trace)
    smooth = saliency(model, trace, samples=4)
    np.testing.assert_array_equal(smooth.source_scores, saliency(model, trace, samples=4).source_scores)
    assert not np.allclose(smooth.source_scores, plain.source_scores, atol=1e-3)
    assert not np.allclose(smooth.source_scores, saliency(model, trace, samples=4, seed=1).source_scores, atol=1e-3)
    np.testing.assert_allclose(
        saliency(model, trace, samples=3, noise=0.0).source_scores, plain.source_scores, atol=1e-6
    )
    assert smooth.samples == 4 and plain.samples == 0


def test_a_check_runs_before_each_pass_and_may_stop_it(model: object, trace: AttentionTrace) -> None:
    """`check` (a server's time limit) is called before every pass forward and back: once a copy
    of SmoothGrad's, and what it raises stops the reading."""
    calls: list[int] = []
    saliency(model, trace, samples=3, check=lambda: calls.append(1))
    assert len(calls) == 3

    def late() -> None:
        calls.append(1)
        if len(calls) > 4:
            raise AttnlabError("stopped")

    with pytest.raises(AttnlabError, match="^stopped$"):
        saliency(model, trace, samples=3, check=late)
    assert len(calls) == 5


def test_a_callers_inference_mode_gives_the_same_scores(model: object, trace: AttentionTrace) -> None:
    """A notebook decoding under `torch.inference_mode()` got autograd's "element 0 of tensors does
    not require grad" from the backward pass (`torch.no_grad()` was fine)."""
    with torch.inference_mode():
        inside = saliency(model, trace)
    assert np.array_equal(inside.source_scores, saliency(model, trace).source_scores)


def test_a_trace_recorded_with_heads_off_is_read_with_them_off(model: object) -> None:
    """The gradients of a trace recorded with heads off are those of the model with them off."""
    off = {("encoder", 0): [0, 1, 2]}
    trace = model.translate(PAIR[0], record=True, ablate_heads=off).trace
    with attnlab.ablate(model, off):
        expected = saliency(model, trace).source_scores
    got = saliency(model, trace).source_scores
    np.testing.assert_allclose(got, expected, atol=1e-6)
    plain_trace = copy.deepcopy(trace)
    plain_trace.meta.pop("heads_off")
    assert not np.allclose(saliency(model, plain_trace).source_scores, expected, atol=1e-3)


def test_refusals_are_one_line(model: object, trace: AttentionTrace) -> None:
    int8 = load(CHECKPOINTS / "multi30k-en-de", dtype="int8")
    with pytest.raises(AttnlabError, match="^gradient saliency differentiates through the model: .*not int8$"):
        saliency(int8, int8.score(*PAIR, record=True).trace)
    bad = [{"samples": -1}, {"samples": 2.5}, {"samples": True}, {"noise": -0.1}, {"noise": "big"}, {"noise": True}]
    bad += [{"seed": 2**70}, {"seed": "x"}, {"seed": 1.5}, {"seed": None}, {"seed": -1}]
    for setting in bad:
        with pytest.raises(AttnlabError, match="^(samples|noise|seed) is "):
            saliency(model, trace, **setting)
    numpy = saliency(model, trace, samples=np.int64(2), noise=np.float32(0.1), seed=np.int64(3))  # numbers as any
    np.testing.assert_array_equal(
        numpy.source_scores, saliency(model, trace, samples=2, noise=0.1, seed=3).source_scores
    )
    with pytest.raises(AttnlabError, match="^gradient saliency needs what attnlab.load returns"):
        saliency(model.model, trace)
    model.model.train()
    try:
        with pytest.raises(AttnlabError, match="eval mode"):
            saliency(model, trace)
    finally:
        model.model.eval()


def test_saliency_reads_as_alignment() -> None:
    """`--method saliency` links each target word to its most salient source word, reads no layer
    or head, and needs the model; every reading of a model's heads includes it once."""
    trace = AttentionTrace(["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"], {"cross": [np.full((1, 3, 3), 1 / 3)]})
    salient = np.array([[0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]])
    src, tgt = [(0,), (1,), ()], [(0,), (1,), ()]
    assert trace_links(trace, src, tgt, "saliency", salient=salient) == {(1, 0), (0, 1)}
    assert attention_rows(trace, "saliency", salient=salient) == (pytest.approx(salient), 0)
    with pytest.raises(AttnlabError, match="^--method saliency reads the model as well as the trace"):
        trace_links(trace, src, tgt, "saliency")
    with pytest.raises(AttnlabError, match="^--method saliency takes no --layer 1$"):
        trace_links(trace, src, tgt, "saliency", layer=1, salient=salient)
    assert [c for c in candidates(2, 2) if c["method"] == "saliency"] == [
        {"method": "saliency", "layer": None, "head": None}
    ]


def test_align_command_reads_saliency(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`attnlab align --method saliency` prints one line of links per pair, and refuses a layer."""
    from attnlab.cli import main

    pairs = tmp_path / "pairs"
    pairs.write_text(f"{PAIR[0]} ||| {PAIR[1]}\nA dog . ||| Ein Hund .\n", encoding="utf-8")
    base = ["align", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "--input", str(pairs), "--method", "saliency"]
    assert main(base) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [len(line.split()) for line in lines] == [7, 3] and "2-2" in lines[0].split()  # one link a target word
    assert main([*base, "--layer", "0"]) == 2
    assert capsys.readouterr().err.strip() == "attnlab align: error: --method saliency takes no --layer 0"


def test_smoothgrad_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--samples` averages the saliency reading's gradient over noisy copies, in `align` and in
    `evaluate --all-heads` (its row named so, and kept by --save-best for `align`); a reading that
    reads no gradient, or --hyp's given links, refuses it (it was ignored)."""
    import shutil

    from attnlab.cli import main
    from attnlab.decode.align_command import smoothing

    model = tmp_path / "model"
    shutil.copytree(CHECKPOINTS / "multi30k-en-de", model)
    pairs, gold = tmp_path / "pairs", tmp_path / "gold"
    pairs.write_text(f"{PAIR[0]} ||| {PAIR[1]}\n", encoding="utf-8")
    gold.write_text("0-0 1-1 2-2 3-3 4-4 5-5 6-6\n", encoding="utf-8")
    base = ["align", "--checkpoint", str(model), "--input", str(pairs), "--method", "saliency"]
    assert main(base) == 0 and main([*base, "--samples", "8"]) == 0
    plain, smooth = capsys.readouterr().out.splitlines()
    assert plain != smooth  # (SmoothGrad links "Hunde" to "dogs", the plain gradient to "Two")
    assert main([*base[:-1], "layer", "--samples", "8"]) == 2
    assert capsys.readouterr().err.strip() == "attnlab align: error: --samples is for --method saliency, not layer"
    evaluate = ["evaluate", "--task", "align", "--gold", str(gold), "--checkpoint", str(model), "--input", str(pairs)]
    assert main([*evaluate, "--all-heads", "--samples", "8", "--save-best", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["reading"] for r in rows if r["method"] == "saliency"] == ["saliency smoothgrad 8"]
    saved = json.loads((model / "config.json").read_text())["meta"]["alignment"]
    assert saved["method"] != "saliency" and "samples" not in saved  # (the best here: no copies to keep)
    gold.write_text(smooth + "\n", encoding="utf-8")  # a gold SmoothGrad's links match: its reading is best
    assert main([*evaluate, "--all-heads", "--samples", "8", "--save-best", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["reading"] == "saliency smoothgrad 8"
    assert json.loads((model / "config.json").read_text())["meta"]["alignment"]["samples"] == 8
    assert main(base[:-2]) == 0 and capsys.readouterr().out.splitlines() == [smooth]  # align reads the card's
    best = {"method": "saliency", "layer": None, "head": None}
    assert smoothing(2, best, {"alignment": {**best, "samples": 8}}) == 2  # --samples over the card's
    assert smoothing(None, {**best, "method": "all"}, {"alignment": {**best, "samples": 8}}) == 0
    assert main([*evaluate[:-2], "--hyp", str(gold), "--samples", "8"]) == 2
    assert "--samples is SmoothGrad's for the saliency reading: give it with --all-heads" in capsys.readouterr().err
