"""Direct logit attribution (`attnlab.record.logit_attribution`): every decoder part's share of
an output piece's logit, exact for the paper's post-LN stack. The shares must add up to the logit
the model itself computed (for every contrast, pre-norm and imported Marian stacks, bf16 and int8
to their rounding), each share must sit under its own (kind, layer, head) (a head switched off
writes nothing, and nowhere else), and the refusals are one line.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.errors import AttnlabError
from attnlab.model.transformer import Transformer
from attnlab.record.logit_attribution import LogitAttribution, logit_attribution

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
SENTENCE = "A man is riding a bicycle down the street."


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINTS / "multi30k-en-de")


def check_sums(got: LogitAttribution, atol: float) -> None:
    """The shares add up to the model's logit, and the cross heads' split by source position to their shares."""
    np.testing.assert_allclose(got.total, got.logit, atol=atol)
    np.testing.assert_allclose(got.cross_source.sum(-1), got.cross_heads, atol=1e-9)


@pytest.mark.parametrize("against", ["mean", "runner-up", "▁der"])
def test_the_shares_add_up_to_the_logit_the_model_computed(model: Model, against: str) -> None:
    """fp32, to 1e-4 on logits of 5-15. Read without pulling r back through each LayerNorm (as a
    tool made for pre-norm stacks reads them) the shares miss the logit by 23-42; pulled back
    without centring, by 0.09-0.12."""
    result = model.translate(SENTENCE, record=True)
    got = logit_attribution(model, result.trace, against=against)
    n, h, length = model.config.n_layers, model.config.n_heads, len(result.tokens)
    assert got.self_heads.shape == got.cross_heads.shape == (n, h, length) and got.ffn.shape == (n, length)
    assert got.cross_source.shape == (n, h, length, len(result.trace.src_tokens))
    assert got.produced == result.tokens and got.source == result.trace.src_tokens
    check_sums(got, atol=1e-4)
    if against == "mean":
        assert got.contrast == [""] * length and (got.logit > 5).all()  # a translated piece stands out
    elif against == "runner-up":  # beam search can output a piece the model ranks second: a negative logit
        assert all(c != p for c, p in zip(got.contrast, got.produced, strict=True))
    else:
        assert set(got.contrast) == {"▁der"}
    parts = got.parts(1)  # "▁Mann": every part once, largest first
    assert len(parts) == 2 * n * h + n + 3 and list(parts.values())[0] == max(parts.values(), key=abs)
    assert np.isclose(sum(parts.values()), got.logit[1], atol=1e-4)


def test_each_share_is_under_its_own_head(model: Model) -> None:
    """A trace recorded with heads switched off is read with them off: their shares are exactly 0,
    the other heads' are not, and the sum is the ablated model's logit."""
    heads = {("cross", 2): [1, 3], ("decoder", 0): [2]}
    result = model.translate(SENTENCE, record=True, ablate_heads=heads)
    got = logit_attribution(model, result.trace)
    check_sums(got, atol=1e-4)
    assert (got.cross_heads[2, [1, 3]] == 0).all() and (got.self_heads[0, 2] == 0).all()
    assert (got.cross_source[2, [1, 3]] == 0).all()
    assert np.abs(got.cross_heads[2, [0, 2]]).min() > 0 and np.abs(got.cross_heads[:2, [1, 3]]).max() > 0.01
    assert np.abs(got.self_heads[1:, 2]).max() > 0.01


def test_a_pre_norm_stack_is_read_through_its_final_norm(model: Model) -> None:
    """A random pre-norm model (its final norm's scale 3, far from the layers'): the shares add up
    only when r is pulled back through the final LayerNorm once and through no block's."""
    torch.manual_seed(0)
    net = Transformer(replace(model.config, norm="pre", n_layers=2))
    with torch.no_grad():
        net.final_norms[1].weight.fill_(3.0)
    pre = Model(net.eval(), model.tokenizer, model.meta)
    got = logit_attribution(pre, pre.score("A dog runs.", "Ein Hund läuft.").trace, against="runner-up")
    check_sums(got, atol=1e-4)
    assert np.abs(got.logit).max() > 0.1  # (a random model's logits differ: the check above can fail)


@pytest.mark.parametrize("variant", ["swish-shared", "separate-untied"])
def test_an_imported_marian_model_adds_up_with_its_own_output_layer(tmp_path: Path, variant: str) -> None:
    """Marian's logits carry a bias (in `bias`), and separate vocabularies have an untied output matrix."""
    from marian_models import make_marian

    marian = load(make_marian(tmp_path / variant, variant))
    got = logit_attribution(marian, marian.translate("the dog runs in the park", record=True).trace)
    check_sums(got, atol=1e-4)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_bf16_and_int8_add_up_to_their_rounding(dtype: str) -> None:
    """The shares are computed in float64 from what the layers really wrote (int8's weights
    dequantized): they miss the model's own logit by its rounding only, 0.02-0.06 here."""
    quick = load(CHECKPOINTS / "multi30k-en-de", dtype=dtype)
    got = logit_attribution(quick, quick.translate(SENTENCE, record=True).trace, against="runner-up")
    check_sums(got, atol=0.15)


def test_what_it_cannot_read_is_one_line(model: Model) -> None:
    trace = model.score("A dog runs.", "Ein Hund läuft.").trace
    training = Model(Transformer(model.config), model.tokenizer, model.meta)
    fresh = training.score("A dog runs.", "Ein Hund läuft.").trace
    training.model.train()  # (as a fine-tuning loop leaves it)
    for args, kwargs, match in (
        ((model.model, trace), {}, "^direct logit attribution needs what attnlab.load returns, got Transformer$"),
        ((model, trace), {"against": "nothing-like-a-piece"}, "^against is 'mean', 'runner-up' or a piece"),
        ((model, trace), {"against": 3}, "^against is .* got 3$"),
        ((training, fresh), {}, "eval mode; call .eval"),
    ):
        with pytest.raises(AttnlabError, match=match) as info:
            logit_attribution(*args, **kwargs)
        assert "\n" not in str(info.value)


def test_a_position_it_does_not_have_is_one_line_as_the_figure_words_it(model: Model) -> None:
    """`parts` and `writer` take the positions the figure takes, with its wording: 99 and -99 were
    IndexErrors, 1.0 and "1" too, True and None failed as "the truth value of an array is ambiguous"."""
    from attnlab.viz.logit_attribution import logit_attribution_figure

    got = logit_attribution(model, model.translate("A dog runs.", record=True).trace)
    last = len(got.produced) - 1
    assert got.parts(-1) == got.parts(last) and got.writer(np.int64(-1)) == got.writer(last)
    for position in (99, -99, 1.0, "1", True, None):
        for read in (got.parts, got.writer, lambda p: logit_attribution_figure(got, p)):
            with pytest.raises(AttnlabError) as info:
                read(position)
            said = f"no position {position!r}: choose from {', '.join(map(str, range(last + 1)))} (-1: the last)"
            assert str(info.value) == said


# -- the command -------------------------------------------------------------------------------------------
def test_the_command_names_each_pieces_largest_writer(
    model: Model, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`attnlab lens --attribute`: `piece@part` (the part with the largest share), an empty line for
    an empty input line (not a failure), each kind's share of all the logits on stderr; `--json`
    carries the shares, and for the empty line an object of the same keys, their lists empty."""
    from attnlab.cli import main

    source = tmp_path / "in.en"
    source.write_text(f"{SENTENCE}\n\nTwo dogs play in the snow.\n", encoding="utf-8")
    argv = ["lens", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "-i", str(source), "--attribute"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    first, empty, _ = captured.out.splitlines()
    got = logit_attribution(model, model.translate(SENTENCE, record=True).trace)
    expected = [f"{p}@{next(iter(got.parts(i))).replace(' ', '_')}" for i, p in enumerate(got.produced)]
    assert first.split() == expected and empty == ""
    assert any("@cross_L" in w for w in expected) and any("@ffn_L" in w for w in expected)  # (not all alike)
    kinds, writers = captured.err.splitlines()[-2:]
    pieces = len(first.split()) + len(captured.out.splitlines()[2].split())
    assert writers.startswith(f"attnlab lens: the largest direct writer of the {pieces} pieces: ")
    counted = [float(part.split()[-1].rstrip("%")) for part in writers.split(": ", 2)[2].split(", ")]
    assert counted == sorted(counted, reverse=True) and len(counted) <= 6
    named = [w.split("@")[1].replace("_", " ") for w in expected]
    assert max(set(named), key=named.count) in writers  # the first line's commonest writer is among the file's
    assert kinds.startswith("attnlab lens: of the ") and "(against the mean logit): cross-attention " in kinds
    shares = [float(part.split()[-1].rstrip("%")) for part in kinds.split(": ", 2)[2].split(", ")]
    assert len(shares) == 6 and sum(shares) == pytest.approx(100.0, abs=0.5)  # the kinds add up to the logits

    assert main([*argv, "--json", "--against", "runner-up"]) == 0
    row, blank, _ = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert blank == dict.fromkeys(row, [])
    ranked = logit_attribution(model, model.translate(SENTENCE, record=True).trace, against="runner-up")
    assert row["tokens"] == ranked.produced and row["against"] == ranked.contrast
    np.testing.assert_allclose(row["cross_heads"], ranked.cross_heads, atol=1e-4)
    np.testing.assert_allclose(np.sum(row["source_shares"], 1), ranked.cross_heads.sum((0, 1)), atol=1e-3)

    assert main([*argv[:-1], "--against", "runner-up"]) == 2
    assert capsys.readouterr().err.strip() == (
        "attnlab lens: error: --against reads each logit against a contrast with --attribute only"
    )


def test_a_piece_read_against_itself_has_no_writer(
    model: Model, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--against ▁Hund` where the model outputs ▁Hund: that position's readout is 0, so every
    share is 0 and no part wrote it. It named "embedding" (the first of a tie of zeros) and counted
    it among the writers; now `writer` is None, the line says `▁Hund@-`, stderr leaves it out of
    the shares and says so, and --json's "writer" is null there."""
    from attnlab.cli import main

    sentence = "A dog runs ."
    got = logit_attribution(model, model.translate(sentence, record=True).trace, against="▁Hund")
    itself = got.produced.index("▁Hund")
    assert not any(got.parts(itself).values()) and got.writer(itself) is None
    assert all(got.writer(i) == next(iter(got.parts(i))) for i in range(len(got.produced)) if i != itself)

    source = tmp_path / "in.en"
    source.write_text(f"{sentence}\n", encoding="utf-8")
    argv = ["lens", "--checkpoint", str(CHECKPOINTS / "multi30k-en-de"), "-i", str(source), "--attribute"]
    assert main([*argv, "--against", "▁Hund"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split()[itself] == "▁Hund@-"
    writers = captured.err.splitlines()[-1]
    n = len(got.produced) - 1
    assert writers.startswith(f"attnlab lens: the largest direct writer of the {n} pieces: ")
    assert writers.endswith("; 1 left out (the piece read against: every share 0)") and "embedding" not in writers
    shares = [float(part.split()[-1].rstrip("%")) for part in writers.split(": ", 2)[2].split(";")[0].split(", ")]
    assert sum(shares) == pytest.approx(100.0, abs=0.5)  # of the pieces that have a writer

    assert main([*argv, "--against", "▁Hund", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["writer"] == [got.writer(i) for i in range(len(got.produced))] and row["writer"][itself] is None
