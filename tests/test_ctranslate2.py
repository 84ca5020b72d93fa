"""`attnlab export ctranslate2`: attnlab's own translator and imported Marian models served by
CTranslate2 give attnlab's translations; what CTranslate2 cannot express is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import sacrebleu
import sentencepiece as spm
import torch
from marian_models import VARIANTS, make_marian

import attnlab
from attnlab.cli import main
from attnlab.data.corpora import find_data_dir, read_lines
from attnlab.decode.api import Model
from attnlab.errors import DataError
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer

ctranslate2 = pytest.importorskip("ctranslate2")
ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"


def ct2_translate(model: Model, path: Path, lines: list[str], beam: int, alpha: float = 0.6) -> list[list[str]]:
    """CTranslate2's output pieces for `lines`, fed as a user would: the sentencepiece pieces of
    each sentence, no </s> (the exported model appends it, as attnlab does), each sentence with
    attnlab's length limit: input + 50 pieces, then </s>, which CTranslate2's `max_decoding_length`
    does not count."""
    translator = ctranslate2.Translator(str(path), device="cpu", intra_threads=torch.get_num_threads())
    spm_file = "source.spm" if model.meta.get("tokenizer") == "marian" else "spm.model"
    sp = spm.SentencePieceProcessor(model_file=str(Path(model.path) / spm_file))
    rows = [sp.encode(line, out_type=str) for line in lines]
    by_limit: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_limit.setdefault(len(row) + 50, []).append(i)
    out: list[list[str]] = [[] for _ in rows]
    for limit, index in by_limit.items():
        results = translator.translate_batch(
            [rows[i] for i in index], beam_size=beam, length_penalty=alpha, max_decoding_length=limit, max_batch_size=64
        )
        for i, result in zip(index, results, strict=True):
            out[i] = result.hypotheses[0]
    return out


@pytest.mark.slow
def test_bundled_translator_served_by_ctranslate2_translates_like_attnlab(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        data = find_data_dir()
    except DataError:
        pytest.skip("the shared corpora are not here")
    if not (BUNDLED / "manifest.json").is_file():
        pytest.skip("the bundled translator is not there")
    source = list(read_lines(data / "multi30k" / "test2016.en"))
    reference = list(read_lines(data / "multi30k" / "test2016.de"))
    assert main(["export", "ctranslate2", str(BUNDLED), "--out", str(tmp_path / "ct2")]) == 0
    assert "language code" not in capsys.readouterr().out  # (attnlab's own vocabulary has none)
    umask = os.umask(0o022)
    os.umask(umask)  # readable by others as any directory and file made here (mkdtemp: 0700)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "ct2", *(tmp_path / "ct2").iterdir()]}
    assert modes == {name: (0o777 if name == "ct2" else 0o666) & ~umask for name in modes}
    model = attnlab.load(BUNDLED)
    served = ct2_translate(model, tmp_path / "ct2", source, beam=1)
    ours = model.translate(source, beam=1)
    detok = [
        model.detokenize([model.target_tokenizer.piece_to_id(p) for p in pieces], s)
        for pieces, s in zip(served, source, strict=True)
    ]
    same = sum(a == b.text for a, b in zip(detok, ours, strict=True))
    assert len(source) == 1000 and same >= 0.98 * len(source), same
    beam_ours = [r.text for r in model.translate(source, beam=4, alpha=0.6)]
    beam_served = [
        model.detokenize([model.target_tokenizer.piece_to_id(p) for p in pieces], s)
        for pieces, s in zip(ct2_translate(model, tmp_path / "ct2", source, beam=4), source, strict=True)
    ]
    bleu_ours = sacrebleu.corpus_bleu(beam_ours, [reference]).score
    bleu_served = sacrebleu.corpus_bleu(beam_served, [reference]).score
    assert bleu_ours > 30 and abs(bleu_ours - bleu_served) <= 0.3, (bleu_ours, bleu_served)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_imported_marian_served_by_ctranslate2_decodes_like_attnlab(
    tmp_path: Path, variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = make_marian(tmp_path / variant, variant)
    assert main(["import", "marian", str(directory), "--out", str(tmp_path / "imported")]) == 0
    assert main(["export", "ctranslate2", str(tmp_path / "imported"), "--out", str(tmp_path / "ct2")]) == 0
    # its vocabulary holds >>de<<, which source.spm cuts into five pieces: the hint says so
    assert "a leading >>xx<< language code is one piece of its own" in capsys.readouterr().out
    model = attnlab.load(tmp_path / "imported")
    texts = ["the dog runs in the park", "a small red ball plays with the cat", "man", "the child sits"]
    served = ct2_translate(model, tmp_path / "ct2", texts, beam=1)
    ours = [r.tokens[:-1] for r in model.translate(texts, beam=1)]  # without </s>, as CTranslate2 returns them
    assert served == ours and len({tuple(o) for o in ours}) > 1


def test_a_served_model_never_produces_pad_or_bos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """attnlab's search forbids <pad> and <s>; CTranslate2 has no such setting, and this random
    Marian model (its <pad> is the decoder's start) decoded <pad> <pad> i i ... when served."""
    settings = {"activation_function": "relu", "share_encoder_decoder_embeddings": False, "tie_word_embeddings": True}
    monkeypatch.setitem(VARIANTS, "separate-tied", {**settings, "scale_embedding": True})
    directory = make_marian(tmp_path / "marian", "separate-tied", seed=3)
    assert main(["export", "ctranslate2", str(directory), "--out", str(tmp_path / "ct2")]) == 0
    model = attnlab.load(directory)
    texts = ["the dog runs in the park", "a small red ball plays with the cat"]
    served = {beam: ct2_translate(model, tmp_path / "ct2", texts, beam=beam) for beam in (1, 4)}
    assert not {"<pad>", "<s>"} & {piece for out in served.values() for pieces in out for piece in pieces}, served
    # Greedy picks the same words. (A beam may not: this random model gives <pad> and <s> much of
    # its probability, which the served one spreads over the other words, row by row.)
    assert served[1] == [r.tokens[:-1] for r in model.translate(texts, beam=1)]


def test_what_ctranslate2_cannot_express_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundled_spm = BUNDLED / "spm.model"
    if not bundled_spm.is_file():
        pytest.skip("the bundled translator is not there")
    config = preset("B-dk16", n_layers=1, d_model=64, d_ff=64, n_heads=2, d_k=16, d_v=32, vocab_size=8000)
    save_checkpoint(tmp_path / "dk16", Transformer(config), bundled_spm)
    assert main(["export", "ctranslate2", str(tmp_path / "dk16"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert "CTranslate2 needs d_k = d_v = d_model / n_heads" in error and "\n" not in error
    assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    assert main(["export", "ctranslate2", str(BUNDLED), "--out", str(tmp_path / "taken")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_export_replaces_only_a_ctranslate2_model_and_says_why_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--force` once met a file (NotADirectoryError) and a path under a file (FileExistsError)
    with tracebacks; it replaces a CTranslate2 model, never a directory named by mistake."""
    directory = make_marian(tmp_path / "gelu", "gelu")
    (tmp_path / "afile").write_text("keep")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "log.txt").write_text("keep")
    capsys.readouterr()  # transformers' progress bar while saving
    refused = {
        ("afile", "--force"): "afile is a file; --force replaces a directory only",
        # it said "(File exists: …/afile)" of a path under a file, and named the temporary
        # directory nobody typed where the parent could not be written (/proc/.x.tmp-2b43ero9)
        ("afile/sub",): f"cannot write {tmp_path / 'afile/sub'} ({tmp_path / 'afile'} is not a directory)",
        ("run", "--force"): "run is not a CTranslate2 model; refusing to replace it",
    }
    for (out, *force), message in refused.items():
        assert main(["export", "ctranslate2", str(directory), "--out", str(tmp_path / out), *force]) == 2
        error = capsys.readouterr().err.strip()
        assert message in error and "\n" not in error, error
    assert main(["export", "ctranslate2", str(directory), "--out", "/proc/attnlab-export"]) == 2
    assert capsys.readouterr().err.strip().endswith("cannot write /proc/attnlab-export (No such file or directory)")
    assert (tmp_path / "afile").read_text() == "keep" and (tmp_path / "run" / "log.txt").read_text() == "keep"
    for force in ([], ["--force"]):
        assert main(["export", "ctranslate2", str(directory), "--out", str(tmp_path / "ct2"), *force]) == 0
        hint = capsys.readouterr().out
        assert f"{directory / 'source.spm'}'s pieces" in hint and "appends </s>" in hint, hint


def test_exporting_the_parser_says_what_ctranslate2_leaves_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The parser exported without a word; CTranslate2 then decodes trees without the constraint
    that keeps `attnlab parse`'s brackets balanced."""
    parser = ROOT / "checkpoints" / "wsj-parser"
    if not (parser / "manifest.json").is_file():
        pytest.skip("the bundled parser is not in this checkout")
    assert main(["export", "ctranslate2", str(parser), "--out", str(tmp_path / "ct2")]) == 0
    assert "warning: CTranslate2 decodes freely" in capsys.readouterr().err
    assert main(["export", "ctranslate2", str(BUNDLED), "--out", str(tmp_path / "ct2-de")]) == 0
    assert "warning" not in capsys.readouterr().err
