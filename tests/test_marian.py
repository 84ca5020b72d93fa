"""Hugging Face Marian / OPUS-MT models opened by attnlab: the same logits, the same greedy and
beam outputs, the same cross-attention and the same token ids as Hugging Face itself, on random
small models of the three kinds published checkpoints come in; unsupported settings and pickled
code refused; `attnlab import marian` and every view on an imported model."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from marian_models import VARIANTS, make_marian
from safetensors.torch import load_file, save_file
from transformers import MarianMTModel, MarianTokenizer

import attnlab
from attnlab.cli import main
from attnlab.decode.ablation import ablation
from attnlab.errors import AttnlabError, CheckpointError, ConfigError
from attnlab.record.equation import attention_parts
from attnlab.record.stats import head_stats

TEXTS = ["the dog runs in the park", "a small red ball plays with the cat on the big house", "man", "the child sits"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("marian")
    return {name: make_marian(base / name, name, seed=i) for i, name in enumerate(VARIANTS)}


def hf_tokenizer(directory: Path) -> MarianTokenizer:
    separate = (directory / "target_vocab.json").is_file()
    return MarianTokenizer(
        str(directory / "source.spm"),
        str(directory / "target.spm"),
        str(directory / "vocab.json"),
        target_vocab_file=str(directory / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
    )


def hf_model(directory: Path) -> MarianMTModel:
    return MarianMTModel.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_equal_hugging_face(marian: dict[str, Path], variant: str) -> None:
    ours, hf = attnlab.load(marian[variant]), hf_model(marian[variant])
    assert (ours.config.activation, ours.config.pe_layout, ours.config.bos_id) == (
        hf.config.activation_function.replace("silu", "swish"),
        "halves",
        hf.config.pad_token_id,
    )
    batch = hf_tokenizer(marian[variant])(TEXTS[:2], padding=True, return_tensors="pt")
    src = batch["input_ids"]
    tgt = torch.randint(2, ours.config.target_vocab - 1, (2, 7), generator=torch.Generator().manual_seed(1))
    tgt[:, 0] = ours.config.bos_id
    with torch.no_grad():
        expected = hf(**batch, decoder_input_ids=tgt).logits
        got = ours.model(src, tgt)
    assert expected.abs().max() > 1.0  # the comparison below is against logits of a real size
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_and_beam_outputs_equal_hugging_face(marian: dict[str, Path], variant: str) -> None:
    ours, hf, tokenizer = attnlab.load(marian[variant]), hf_model(marian[variant]), hf_tokenizer(marian[variant])
    outputs = set()
    for text in TEXTS:
        src = torch.tensor([tokenizer(text)["input_ids"]])
        assert src[0].tolist() == ours.encode_source(text)[0]
        longest = src.size(1) - 1 + 50 + 1  # attnlab's default: input + 50 pieces, then </s> (which HF counts)
        for beam in (1, 4):
            # α 0 / length_penalty 0: both rank finished hypotheses by their log-probability; the pad
            # token (the decoder's start) is never an output, as published OPUS-MT configs say
            result = ours.translate(text, beam=beam, alpha=0.0)
            got = [ours.target_tokenizer.piece_to_id(p) for p in result.tokens]
            expected = hf.generate(
                src,
                num_beams=beam,
                do_sample=False,
                max_new_tokens=longest,
                length_penalty=0.0,
                bad_words_ids=[[hf.config.pad_token_id]],
            )
            assert got == expected[0, 1:].tolist(), (text, beam)
            outputs.add(tuple(got))
    assert len(outputs) > 2  # the outputs depend on the input: the comparison is not of one constant


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_recorded_cross_attention_equals_hugging_face(marian: dict[str, Path], variant: str) -> None:
    ours, hf, tokenizer = attnlab.load(marian[variant]), hf_model(marian[variant]), hf_tokenizer(marian[variant])
    source, target = TEXTS[1], "the red dog plays"
    trace = ours.score(source, target, record=True).trace
    src = torch.tensor([tokenizer(source)["input_ids"]])
    tgt_ids = tokenizer(text_target=target)["input_ids"][:-1]  # without </s>: it is predicted, not read
    with torch.no_grad():
        out = hf(
            input_ids=src, decoder_input_ids=torch.tensor([[hf.config.pad_token_id, *tgt_ids]]), output_attentions=True
        )
    assert trace.tgt_tokens[-1] == "</s>" and len(trace.tgt_tokens) == len(tgt_ids) + 1
    for layer, weights in enumerate(out.cross_attentions):
        torch.testing.assert_close(
            torch.as_tensor(trace.attention("cross", layer).copy()), weights[0], atol=1e-5, rtol=1e-4
        )
    for layer, weights in enumerate(out.encoder_attentions):
        torch.testing.assert_close(
            torch.as_tensor(trace.attention("encoder", layer).copy()), weights[0], atol=1e-5, rtol=1e-4
        )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_token_ids_equal_marian_tokenizer(marian: dict[str, Path], variant: str) -> None:
    ours, tokenizer = attnlab.load(marian[variant]), hf_tokenizer(marian[variant])
    texts = [*TEXTS, "the dög ☃ runs 狗", ">>de<< the dog", ">>de<<the dog", "  the   cat  ", "zzz qqq"]
    for text in texts:
        assert ours.encode_source(text)[0] == tokenizer(text)["input_ids"], text
        target = tokenizer(text_target=text)["input_ids"]
        assert ours.target_tokenizer.encode(text) + [ours.config.eos_id] == target, text
    assert ours.tokenizer.unk_id() in ours.encode_source("zzz qqq")[0]  # pieces outside vocab.json are <unk>
    # an <unk> written is "⁇", one space either side ("the ⁇  ⁇  the": sentencepiece spaces each one)
    target, unk = ours.target_tokenizer, ours.target_tokenizer.unk_id()
    words = [next(i for piece, i in target.vocab.items() if piece.startswith("\u2581") and piece[1:].isalpha())]
    said = target.decode(words)
    assert unk not in words and target.decode([*words, unk, unk, *words, unk]) == f"{said} ⁇ ⁇ {said} ⁇"


def edit_config(directory: Path, out: Path, **changes: object) -> Path:
    shutil.copytree(directory, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **changes}))
    return out


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"normalize_before": True}, "normalize_before=True is not supported (attnlab's Marian blocks are post-norm"),
        # each its own reason: these were all "(attnlab is post-norm, §3.1)"
        ({"static_position_embeddings": False}, "=False is not supported (attnlab reads Marian's sinusoidal positions"),
        ({"add_bias_logits": True}, "add_bias_logits=True is not supported (attnlab adds final_logits_bias alone"),
        ({"normalize_embedding": True}, "normalize_embedding=True is not supported (attnlab normalises no embedding)"),
        ({"decoder_layers": 3}, "encoder_layers=2 differs from decoder_layers=3"),
        ({"activation_function": "tanh"}, "activation_function='tanh' is not supported"),
        ({"decoder_start_token_id": 0}, "decoder_start_token_id=0 is not the pad token"),
        ({"activation_function": ["gelu"]}, "activation_function=['gelu'] is not supported"),
        ({"scale_embedding": "false"}, "scale_embedding='false' must be true or false"),  # bool("false") is True
        ({"encoder_attention_heads": 3, "decoder_attention_heads": 3}, "encoder_attention_heads=3 does not divide"),
        # what ModelConfig refuses, named as config.json says it (they said pad_id, d_ff, max_len, n_layers)
        ({"pad_token_id": None, "decoder_start_token_id": None}, "Marian setting pad_token_id=None must be a whole"),
        (
            {"encoder_ffn_dim": 2**21, "decoder_ffn_dim": 2**21},
            "Marian setting encoder_ffn_dim=2097152 must be at most",
        ),
        ({"max_position_embeddings": 1}, "Marian setting max_position_embeddings=1 must be from 2 (a token and </s>"),
        ({"encoder_layers": 0, "decoder_layers": 0}, "Marian setting encoder_layers=0 must be a positive integer"),
        ({"d_model": 0}, "Marian setting d_model=0 must be a positive integer"),
        ({"vocab_size": 2**25}, "Marian setting vocab_size=33554432 must be at most 16,777,216"),
        ({"share_encoder_decoder_embeddings": False, "decoder_vocab_size": -5}, "decoder_vocab_size=-5 must be a posi"),
        ({"eos_token_id": 10**6}, "and eos_token_id=1000000 must be ids inside the vocabulary (0 to"),
        ({"eos_token_id": True}, "Marian setting eos_token_id=True must be a whole number"),  # JSON true
        # what goes into the model card and meta: a lone surrogate was a UnicodeEncodeError traceback
        # writing the card; a mapping for a name, or a NaN dropout, were imported without a word
        ({"_name_or_path": "\ud800evil"}, "Marian setting _name_or_path='\\ud800evil' must be text (a string UTF-8"),
        ({"_name_or_path": {"x": [1, 2]}}, "Marian setting _name_or_path={'x': [1, 2]} must be text"),
        ({"transformers_version": 4.4}, "Marian setting transformers_version=4.4 must be text"),
        ({"architectures": "MarianMTModel"}, "Marian setting architectures='MarianMTModel' must be a list of class"),
        ({"dropout": float("nan")}, "Marian setting dropout=nan must be a number from 0 to below 1"),
        ({"dropout": 1.0}, "Marian setting dropout=1.0 must be a number from 0 to below 1"),
        ({"dropout": "0.1"}, "Marian setting dropout='0.1' must be a number from 0 to below 1"),
    ],
)
def test_unsupported_settings_are_refused_in_one_line(
    marian: dict[str, Path], tmp_path: Path, changes: dict, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = edit_config(marian["swish-shared"], tmp_path / "edited", **changes)
    with pytest.raises(ConfigError, match=re.escape(message)):
        attnlab.load(directory)
    assert main(["import", "marian", str(directory), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error and not (tmp_path / "out").exists()
    assert not re.search(r"\b(n_layers|d_ff|n_heads|d_k|d_v|max_len|tgt_vocab_size|pad_id|bos_id|eos_id)\b", error)
    assert ", got " not in error, error  # the value is said once, beside its key


def test_a_config_naming_a_huge_model_is_refused_before_anything_is_allocated(
    marian: dict[str, Path], tmp_path: Path
) -> None:
    """d_model 131072 in an edited config.json: the model was built (30 GB) before its shapes were
    compared with the weights'. Run under an 8 GB address-space limit, where building it fails."""
    directory = edit_config(marian["swish-shared"], tmp_path / "huge", d_model=131072)
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)); import attnlab\n"
        "try: attnlab.load(sys.argv[1])\nexcept attnlab.errors.CheckpointError as error: print(error)"
    )
    done = subprocess.run([sys.executable, "-c", script, str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "weights do not match config.json" in done.stdout, done.stderr[-1000:]


def edit_vocab(directory: Path, **changes: object) -> None:
    vocab = json.loads((directory / "vocab.json").read_text())
    (directory / "vocab.json").write_text(json.dumps({k: v for k, v in {**vocab, **changes}.items() if v is not None}))


def integer_weights(directory: Path) -> None:
    weights = load_file(str(directory / "model.safetensors"))
    save_file({k: (v * 100).long() for k, v in weights.items()}, str(directory / "model.safetensors"))


def nan_weights(directory: Path) -> None:
    weights = load_file(str(directory / "model.safetensors"))
    weights["model.decoder.layers.0.fc1.weight"][0, 0] = float("nan")  # translate: an IndexError
    save_file(weights, str(directory / "model.safetensors"))


def sharded(directory: Path) -> None:
    """The weights saved as transformers saves a big model: in shards, with an index."""
    model = MarianMTModel.from_pretrained(directory)
    (directory / "model.safetensors").unlink()
    model.save_pretrained(directory, max_shard_size="20KB")


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    # both said "no model.safetensors or pytorch_model.bin" / "not an attnlab checkpoint (no manifest.json)"
    "sharded weights": (sharded, "its weights are sharded (model.safetensors.index.json); attnlab reads one file"),
    "no config.json": (lambda d: (d / "config.json").unlink(), "Marian model (no config.json)"),
    "no target.spm": (lambda d: (d / "target.spm").unlink(), "a Marian model needs target.spm"),
    "ids not integers": (lambda d: edit_vocab(d, the="7"), "a vocabulary maps pieces to integer ids"),
    "no <unk>": (lambda d: edit_vocab(d, **{"<unk>": None}), "vocab.json has no <unk> piece"),
    "no </s>": (lambda d: edit_vocab(d, **{"</s>": None}), "vocab.json has no </s> piece"),
    "a negative id": (lambda d: edit_vocab(d, the=-2), "vocab.json gives 'the' the negative id -2"),
    "garbage source.spm": (lambda d: (d / "source.spm").write_bytes(b"xx"), "source.spm: not a sentencepiece model"),
    "ids past the vocabulary": (lambda d: edit_vocab(d, zzz=1000), "has ids up to 1,000 but config.json a vocabulary"),
    "integer weights": (integer_weights, "not floating point"),
    "NaN weights": (nan_weights, "model.decoder.layers.0.fc1.weight holds NaN or infinite weights"),
    # loaded, it was "not an attnlab checkpoint (no manifest.json)"
    "config.json not UTF-8": (
        lambda d: (d / "config.json").write_bytes(b'{"model_type": "marian", "x": "\xff"}'),
        "config.json: not readable JSON (UnicodeDecodeError)",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_import_refuses_a_directory_it_could_not_serve(
    marian: dict[str, Path], tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these once imported without complaint; the checkpoint then failed on every
    sentence (or, with integer weights, translated nonsense)."""
    directory = tmp_path / "damaged"
    shutil.copytree(marian["swish-shared"], directory)
    change, message = DAMAGES[damage]
    change(directory)
    capsys.readouterr()  # (transformers' progress bars while resharding)
    assert main(["import", "marian", str(directory), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error and not (tmp_path / "out").exists()
    with pytest.raises(AttnlabError, match=re.escape(message)):  # opened as it is, without importing
        attnlab.load(directory)


# (variant, the file's tensor, what is done to it): one of each kind the model reads
WEIGHT_EDITS = [
    ("swish-shared", "model.decoder.layers.1.fc1.weight", "cut"),
    ("swish-shared", "model.encoder.layers.0.self_attn.q_proj.weight", "drop"),
    ("swish-shared", "model.decoder.layers.0.encoder_attn_layer_norm.bias", "cut"),
    ("swish-shared", "model.encoder.layers.1.final_layer_norm.weight", "drop"),
    ("swish-shared", "model.shared.weight", "cut"),
    ("swish-shared", "model.shared.weight", "drop"),
    ("swish-shared", "final_logits_bias", "cut"),
    ("swish-shared", "model.decoder.layers.0.fc2.bias", "integers"),
    ("separate-untied", "model.decoder.embed_tokens.weight", "cut"),
    ("separate-untied", "model.encoder.embed_tokens.weight", "drop"),
    ("separate-untied", "lm_head.weight", "drop"),
]


@pytest.mark.parametrize(("variant", "name", "edit"), WEIGHT_EDITS)
def test_weights_that_do_not_match_config_json_are_named_as_the_file_names_them(
    marian: dict[str, Path], tmp_path: Path, variant: str, name: str, edit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal named attnlab's tensor (`decoder.layers.1.ffn.w_1.weight`), which the user's
    file does not hold, and not the shapes; a tensor the model has no place for stays ignored."""
    directory = tmp_path / "edited"
    shutil.copytree(marian[variant], directory)
    weights = load_file(str(directory / "model.safetensors"))
    shape = ", ".join(map(str, weights[name].shape))
    if edit == "drop":
        del weights[name]
        message = f"weights do not match config.json ({name} missing)"
    elif edit == "cut":  # one column (or element) short
        weights[name] = weights[name][..., :-1].contiguous()
        cut = ", ".join(map(str, weights[name].shape))
        message = f"weights do not match config.json ({name} has shape ({cut}), config.json implies ({shape}))"
    else:
        weights[name] = weights[name].long()
        message = f"weights do not match config.json ({name} holds torch.int64 values, not floating point)"
    weights["model.encoder.layers.9.fc1.weight"] = torch.zeros(3)  # no such layer: ignored, as before
    save_file(weights, str(directory / "model.safetensors"))
    with pytest.raises(CheckpointError, match=re.escape(message)):
        attnlab.load(directory)
    assert main(["import", "marian", str(directory), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error and not (tmp_path / "out").exists()


def test_a_legacy_file_with_a_tensor_under_a_number_is_refused(marian: dict[str, Path], tmp_path: Path) -> None:
    """An extra tensor keyed 5, not a name, in `pytorch_model.bin` was an AttributeError traceback."""
    directory = tmp_path / "legacy"
    shutil.copytree(marian["swish-shared"], directory)
    weights: dict = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    torch.save({**weights, 5: torch.zeros(2)}, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="does not hold a dictionary of named tensors"):
        attnlab.load(directory)


def test_import_replaces_a_checkpoint_only_with_force(
    marian: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out checkpoints/multi30k-en-de` by mistake once replaced the bundled model silently."""
    out = tmp_path / "imported"
    assert main(["import", "marian", str(marian["gelu"]), "--out", str(out)]) == 0
    before = (out / "manifest.json").read_text()
    assert main(["import", "marian", str(marian["swish-shared"]), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert "already exists" in error and "--force" in error and "\n" not in error
    assert (out / "manifest.json").read_text() == before
    assert main(["import", "marian", str(marian["swish-shared"]), "--out", str(out), "--force"]) == 0
    assert attnlab.load(out).meta["imported_from"]["marian"] == "swish-shared"
    with (out / "README.md").open("a") as card:  # the card it wrote, edited: --force went over it
        card.write("\nMy notes on this model.\n")
    assert main(["import", "marian", str(marian["gelu"]), "--out", str(out), "--force"]) == 2
    assert "README.md was edited since the checkpoint was written" in capsys.readouterr().err
    assert (out / "README.md").read_text().endswith("My notes on this model.\n")
    (tmp_path / "afile").write_text("keep")
    assert main(["import", "marian", str(marian["gelu"]), "--out", str(tmp_path / "afile"), "--force"]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "keep"


class Payload:
    """A pickle that would create a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_legacy_weights_load_and_pickled_code_is_never_run(marian: dict[str, Path], tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    shutil.copytree(marian["gelu"], legacy)
    (legacy / "model.safetensors").unlink()
    torch.save(hf_model(marian["gelu"]).state_dict(), legacy / "pytorch_model.bin")
    src = torch.tensor([attnlab.load(marian["gelu"]).encode_source(TEXTS[0])[0]])
    tgt = torch.tensor([[attnlab.load(legacy).config.bos_id, 3, 4]])
    with torch.no_grad():
        assert torch.equal(attnlab.load(legacy).model(src, tgt), attnlab.load(marian["gelu"]).model(src, tgt))
    marker = tmp_path / "executed"
    with (legacy / "pytorch_model.bin").open("wb") as handle:
        pickle.dump({"model.shared.weight": Payload(marker)}, handle)
    with pytest.raises(CheckpointError, match="refused") as error:
        attnlab.load(legacy)
    assert not marker.exists()
    # in attnlab's words: PyTorch's own text, cut at 160 characters, ended "Re-running `torch."
    assert str(error.value) == (
        f"{legacy / 'pytorch_model.bin'}: refused; it is not plain tensors that PyTorch's safe loader (weights_only)"
        " reads, and a pickle is not unpickled otherwise, since unpickling can run code (convert it to"
        " model.safetensors where it came from, e.g. save_pretrained(safe_serialization=True))"
    )


def test_a_marian_directory_at_a_path_that_is_not_utf8_says_why(marian: dict[str, Path], tmp_path: Path) -> None:
    """It was "not a safetensors file (SafetensorError)": safetensors cannot open such a path."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/marian_\xff"))
    shutil.copytree(marian["gelu"], odd)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot be opened \(Path .* is not valid UTF-8\)"):
        attnlab.load(odd)


def test_import_writes_a_checkpoint_with_a_model_card(marian: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "imported"
    assert main(["import", "marian", str(marian["separate-untied"]), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "separate-untied" in card and "attnlab import marian" in card and "untied" in card
    direct, imported = attnlab.load(marian["separate-untied"]), attnlab.load(out)
    assert imported.meta["imported_from"]["marian"] == "separate-untied"
    # the card is listed in the manifest, but not recorded as a tokenizer ("README.md is not the
    # tokenizer this model was saved with" would have been said of an edited card)
    assert "README.md" in json.loads((out / "manifest.json").read_text())["files"]
    assert "source.spm" in imported.meta["tokenizer_sha256"] and "README.md" not in imported.meta["tokenizer_sha256"]
    assert main(["import", "marian", str(marian["separate-untied"]), "--out", str(out), "--force"]) == 0  # its own
    assert imported.translate(TEXTS[0], beam=4).tokens == direct.translate(TEXTS[0], beam=4).tokens
    assert main(["import", "marian", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2


def test_import_of_what_is_no_marian_directory_says_what_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty directory was "EMPTY/config.json: not readable JSON (FileNotFoundError)", as if the
    file were there and damaged; a file given as the directory was "no such directory"."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    for name, said in (
        ("empty", "not a Hugging Face Marian model (no config.json)"),
        ("missing", "does not exist"),
        ("a-file", "not a directory"),
    ):
        assert main(["import", "marian", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
        assert capsys.readouterr().err == f"attnlab import: error: {tmp_path / name}: {said}\n"
        assert not (tmp_path / "out").exists()


def test_every_view_works_on_an_imported_model(marian: dict[str, Path]) -> None:
    model = attnlab.load(marian["separate-untied"])
    result = model.translate(TEXTS[1], record=True)
    trace = result.trace
    assert trace.kinds == ["encoder", "decoder", "cross"] and trace.n_heads == 4
    assert trace.src_tokens == model.pieces(model.encode_source(TEXTS[1])[0], source=True)
    assert trace.tgt_tokens == result.tokens and trace.attention("cross", -1).shape[1:] == (
        len(result.tokens),
        len(trace.src_tokens),
    )
    assert len(head_stats(trace)) == 3 * 2 * 4
    parts = attention_parts(model, trace, "cross", 1, 2)
    assert torch.allclose(
        torch.from_numpy(parts["weights"]), torch.as_tensor(trace.attention("cross", 1)[2].copy()), atol=1e-5
    )
    effect = ablation(model, trace, {("cross", 1): [0, 1, 2, 3]}, beam=1)
    assert len(effect.before) == len(result.tokens) and effect.before != effect.after


def test_the_notebook_widgets_open_a_marian_directory(marian: dict[str, Path]) -> None:
    from attnlab.widgets import explore

    explorer = explore(str(marian["gelu"]), text=TEXTS[0])
    assert explorer.result is not None and explorer.figures["head"] is not None
    assert explorer.view.trace.src_tokens == explorer.model.pieces(
        explorer.model.encode_source(TEXTS[0])[0], source=True
    )


def test_the_output_reads_target_vocab_json_only_where_tokenizer_config_says_so(
    marian: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As MarianTokenizer decides (`separate_vocabs`): a separate-vocabulary directory without
    its target_vocab.json imported and translated through the source's ids into other words,
    and a stray target_vocab.json beside one shared vocabulary was read."""
    from attnlab.model.marian import check_vocabularies

    missing = tmp_path / "missing"
    shutil.copytree(marian["separate-untied"], missing)
    (missing / "target_vocab.json").unlink()
    said = "tokenizer_config.json says separate_vocabs, and there is no target_vocab.json"
    assert main(["import", "marian", str(missing), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert said in error and "\n" not in error
    with pytest.raises(AttnlabError, match=re.escape(said)):
        attnlab.load(missing)
    stray = tmp_path / "stray"
    shutil.copytree(marian["swish-shared"], stray)
    shutil.copy(marian["separate-untied"] / "target_vocab.json", stray)
    text = "the dog runs in the park"
    assert attnlab.load(stray).translate(text).text == attnlab.load(marian["swish-shared"]).translate(text).text
    assert main(["import", "marian", str(stray), "--out", str(tmp_path / "imported")]) == 0
    assert not (tmp_path / "imported" / "target_vocab.json").exists()  # (not the model's: left behind)
    # sides of different sizes and one vocabulary read (a directory without tokenizer_config.json)
    model = attnlab.load(marian["separate-untied"])
    bigger = model.config.replace(tgt_vocab_size=model.config.vocab_size + 5)
    with pytest.raises(AttnlabError, match=r"gives the output a vocabulary of .* \(decoder_vocab_size\)"):
        check_vocabularies(missing, bigger, model.tokenizer, model.tokenizer, separate=False)


def test_a_language_code_is_no_unknown_character_and_unknown_ones_are_said_as_unk(
    marian: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ ">>de<<" is one piece of the vocabulary: read a character at a time, its ">" and "<" were
    named as unknown on every line, and every unknown character was said to be read as UTF-8 byte
    pieces, which Marian's tokenizer has not (it reads them as <unk>): in the explorer too."""
    from attnlab.app.explorer import Explorer
    from attnlab.app.i18n import text
    from attnlab.app.roots import CheckpointRoots

    source = tmp_path / "in.txt"
    source.write_text(">>de<< the dog runs\n>>de<< the dog é\n")
    assert main(["translate", "--checkpoint", str(marian["swish-shared"]), "--input", str(source), "--beam", "1"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "vocabulary" in line]
    assert said == [
        "attnlab translate: 1 character is not in this model's vocabulary, read as <unk> (first on line 2): é"
    ]
    shown = Explorer({"marian": str(marian["swish-shared"])}, CheckpointRoots([tmp_path]))
    shown.open_listed("marian")
    shown.text_input.value = ">>de<< the dog é"
    shown.translate()
    assert text("notice.unknown_unk", "en", count=1, characters="é") in shown.store.notices
