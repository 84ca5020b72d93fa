"""Hugging Face Marian / OPUS-MT models as attnlab `Transformer`s, read from a local directory.

A `MarianMTModel` is the paper's post-norm encoder–decoder with a few differences of detail,
each a `ModelConfig` field: the FFN's activation (`swish` in OPUS-MT), sinusoids laid out as
sines then cosines, optional √d_model scaling, separate or shared source/target embeddings, an
untied output matrix, a bias on the logits, and the pad token as the decoder's start. Whatever
the model cannot represent is refused with one sentence naming the setting.

Weights are read from `model.safetensors`, or from a legacy `pytorch_model.bin` with
`torch.load(weights_only=True)`, which refuses any pickle that would build arbitrary objects;
nothing is downloaded.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from attnlab.errors import CheckpointError, ConfigError, json_loads
from attnlab.model.checkpoint import check_weights, unreadable
from attnlab.model.config import ModelConfig
from attnlab.model.transformer import Transformer

ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
# `MarianConfig`'s defaults: `save_pretrained` leaves out the settings that equal them.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOP_LEVEL = ("final_logits_bias", "lm_head.weight")  # MarianMTModel's own; the rest are under `model.`
# Settings a Marian config may carry that attnlab's model has no equivalent for: the value
# under which they are harmless, and what attnlab does instead (said in the refusal).
UNSUPPORTED = {
    "normalize_before": (False, "attnlab's Marian blocks are post-norm, §3.1"),
    "normalize_embedding": (False, "attnlab normalises no embedding"),
    "layernorm_embedding": (False, "attnlab normalises no embedding"),
    "add_final_layer_norm": (False, "attnlab's Marian blocks are post-norm, §3.1, with no final norm"),
    "static_position_embeddings": (True, "attnlab reads Marian's sinusoidal positions, §3.5"),
    "add_bias_logits": (False, "attnlab adds final_logits_bias alone to the logits"),
}
# attnlab's field -> the config.json key it is read from, so that a refusal names what the user
# can find in their file (ModelConfig's own checks speak of d_ff and pad_id, which Marian has not).
# Encoder and decoder keys are equal by then; d_k and d_v follow from d_model and the heads.
MARIAN_KEYS = {
    "n_layers": "encoder_layers",
    "d_model": "d_model",
    "d_ff": "encoder_ffn_dim",
    "n_heads": "encoder_attention_heads",
    "vocab_size": "vocab_size",
    "tgt_vocab_size": "decoder_vocab_size",
    "max_len": "max_position_embeddings",
    "pad_id": "pad_token_id",
    "bos_id": "decoder_start_token_id",
    "eos_id": "eos_token_id",
}
_FIELD = re.compile(rf"\b({'|'.join(MARIAN_KEYS)})\b(=[^\s,;]+)?")  # with its value, where it says one
_LAYER = {  # Hugging Face name inside a layer -> attnlab name (encoder, decoder)
    "self_attn.q_proj": ("self_attn.w_q", "self_attn.w_q"),
    "self_attn.k_proj": ("self_attn.w_k", "self_attn.w_k"),
    "self_attn.v_proj": ("self_attn.w_v", "self_attn.w_v"),
    "self_attn.out_proj": ("self_attn.w_o", "self_attn.w_o"),
    "self_attn_layer_norm": ("res_attn.norm", "res_self.norm"),
    "encoder_attn.q_proj": (None, "cross_attn.w_q"),
    "encoder_attn.k_proj": (None, "cross_attn.w_k"),
    "encoder_attn.v_proj": (None, "cross_attn.w_v"),
    "encoder_attn.out_proj": (None, "cross_attn.w_o"),
    "encoder_attn_layer_norm": (None, "res_cross.norm"),
    "fc1": ("ffn.w_1", "ffn.w_1"),
    "fc2": ("ffn.w_2", "ffn.w_2"),
    "final_layer_norm": ("res_ffn.norm", "res_ffn.norm"),
}


def is_marian(directory: str | Path) -> bool:
    """A Hugging Face directory whose config.json says `model_type: marian`. A config.json that
    is there but not JSON is one line naming it (asked of a directory without manifest.json,
    it was "not an attnlab checkpoint (no manifest.json)", which sent the reader elsewhere)."""
    path = Path(directory) / "config.json"
    try:
        return json_loads(path.read_text(encoding="utf-8")).get("model_type") == "marian"
    except (OSError, AttributeError):
        return False
    except ValueError as error:  # (UnicodeDecodeError too)
        raise CheckpointError(f"{path}: not readable JSON ({type(error).__name__})") from None


def read_hf_config(directory: Path) -> dict[str, Any]:
    """config.json of a Marian directory; none there is "not a Marian model", not a damaged file
    (it was "config.json: not readable JSON (FileNotFoundError)")."""
    if not (directory / "config.json").is_file():
        raise CheckpointError(f"{directory}: not a Hugging Face Marian model (no config.json)")
    try:
        config = json_loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{directory}/config.json: not readable JSON ({type(error).__name__})") from None
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        raise CheckpointError(f"{directory}: not a Hugging Face Marian model (config.json model_type)")
    return {**DEFAULTS, **config}


def flag(hf: dict[str, Any], key: str) -> bool:
    """A true/false Marian setting; `bool("false")` would be true, so only JSON booleans pass."""
    if not isinstance(hf[key], bool):
        raise ConfigError(f"Marian setting {key}={hf[key]!r} must be true or false")
    return hf[key]


def marian_config(hf: dict[str, Any]) -> ModelConfig:
    """The `ModelConfig` of a Marian config.json, or a one-line `ConfigError` naming what differs."""
    for key, (harmless, instead) in UNSUPPORTED.items():
        if key in hf and flag(hf, key) != harmless:
            raise ConfigError(f"Marian setting {key}={hf[key]!r} is not supported ({instead})")
    pairs = [("encoder_layers", "decoder_layers"), ("encoder_attention_heads", "decoder_attention_heads")]
    pairs.append(("encoder_ffn_dim", "decoder_ffn_dim"))
    for a, b in pairs:
        if hf.get(a) != hf.get(b):
            raise ConfigError(f"Marian setting {a}={hf.get(a)} differs from {b}={hf.get(b)}; attnlab needs them equal")
    activation = hf["activation_function"]
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ConfigError(f"Marian setting activation_function={activation!r} is not supported")
    vocab, pad, start = (hf[k] for k in ("vocab_size", "pad_token_id", "decoder_start_token_id"))
    shared = flag(hf, "share_encoder_decoder_embeddings")
    target_vocab = vocab if shared else hf["decoder_vocab_size"] or vocab
    if start != pad:
        raise ConfigError(f"Marian setting decoder_start_token_id={start} is not the pad token {pad}")
    heads, d_model = hf["encoder_attention_heads"], hf["d_model"]
    if isinstance(heads, int) and isinstance(d_model, int) and heads > 0 and d_model % heads:
        raise ConfigError(f"Marian setting encoder_attention_heads={heads} does not divide d_model={d_model}")
    scale, tie = flag(hf, "scale_embedding"), flag(hf, "tie_word_embeddings")
    try:
        return ModelConfig(
            n_layers=hf["encoder_layers"],
            d_model=d_model,
            d_ff=hf["encoder_ffn_dim"],
            n_heads=heads,
            p_drop=0.0,  # inference only; the original dropout stays in the model card
            eps_ls=0.0,
            vocab_size=vocab,
            tgt_vocab_size=None if shared else target_vocab,
            max_len=hf["max_position_embeddings"],
            pad_id=pad,
            bos_id=start,
            eos_id=hf["eos_token_id"],
            activation=ACTIVATIONS[activation],
            pe_layout="halves",
            scale_embedding=scale,
            share_embeddings=shared,
            tie_output=tie,
            logits_bias=True,
            attn_bias=True,
        )
    except ConfigError as error:
        raise ConfigError(in_marian_terms(str(error), hf)) from None


def in_marian_terms(message: str, hf: dict[str, Any]) -> str:
    """ModelConfig's refusal `message` with each field it names said as the config.json key it was
    read from, with its value at its first mention ("d_ff must be at most 1,048,576, ..., got
    2,097,152" is "Marian setting encoder_ffn_dim=2097152 must be at most 1,048,576, ...")."""
    named: list[str] = []

    def key(field: re.Match[str]) -> str:
        marian = MARIAN_KEYS[field[1]]
        named.append(marian)
        return marian if named.count(marian) > 1 else f"{marian}={hf[marian]!r}"

    said = re.sub(r", got .*$", "", _FIELD.sub(key, message))  # the value is named beside its key already
    return f"Marian setting{'s' if len(set(named)) > 1 else ''} {said}"


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The directory's tensors, never unpickling anything but tensors."""
    safetensors, legacy = (directory / name for name in WEIGHT_FILES)
    if safetensors.is_file():
        try:
            return load_file(str(safetensors))
        except (SafetensorError, OSError, ValueError) as error:
            raise unreadable(safetensors, error) from None
    if legacy.is_file():
        try:
            with warnings.catch_warnings():  # torch's note that Hugging Face pickled with protocol 4: not the user's
                warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
                weights = torch.load(legacy, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # PyTorch's own text, cut at 160 characters, ended "Re-running `torch."
            raise CheckpointError(
                f"{legacy}: refused; it is not plain tensors that PyTorch's safe loader (weights_only) reads, and a "
                "pickle is not unpickled otherwise, since unpickling can run code (convert it to model.safetensors "
                "where it came from, e.g. save_pretrained(safe_serialization=True))"
            ) from None
        except (RuntimeError, EOFError, ValueError, OSError) as error:  # truncated, not a pickle, unreadable
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CheckpointError(f"{legacy}: refused; not a readable PyTorch file ({first[:160]})") from None
        if not isinstance(weights, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()
        ):  # a tensor under an integer key was an AttributeError traceback
            raise CheckpointError(f"{legacy}: refused; it does not hold a dictionary of named tensors")
        return weights
    sharded = next(directory.glob("*.safetensors.index.json"), None) or next(directory.glob("*.bin.index.json"), None)
    if sharded is not None:  # (save_pretrained's max_shard_size: a big model's weights in several files)
        raise CheckpointError(f"{directory}: its weights are sharded ({sharded.name}); attnlab reads one file")
    raise CheckpointError(f"{directory}: no {' or '.join(WEIGHT_FILES)}")


def embedding_names(hf: dict[str, torch.Tensor], config: ModelConfig) -> tuple[str, str]:
    """Names (`model.` dropped) of the (encoder's, decoder's) embedding tables, as transformers 5
    reads them: with shared embeddings and a tied output, both are `shared`; with
    `tie_word_embeddings` false, nothing is tied and each side reads its own table, which may
    differ from `shared` and from the other side's. Files of older versions, which tied both sides
    to `shared` whatever the output, hold `shared` alone (the fallback here) or equal copies."""
    common, tied = "shared.weight", config.share_embeddings and config.tie_output
    if tied and common in hf:
        return common, common
    own = [f"{side}.embed_tokens.weight" for side in ("encoder", "decoder")]
    encoder, decoder = (name if name in hf or (common not in hf and not tied) else common for name in own)
    return encoder, decoder


def embedding_tables(hf: dict[str, torch.Tensor], config: ModelConfig) -> tuple[Any, Any]:
    """(encoder's, decoder's) embedding tables (see `embedding_names`), None where absent."""
    encoder, decoder = embedding_names(hf, config)
    return hf.get(encoder), hf.get(decoder)


def weight_names(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, str]:
    """attnlab's tensor name -> the Hugging Face name it is read from (`model.` prefixes dropped)."""
    names = {"logits_bias": "final_logits_bias"}
    names["embed.weight"], target = embedding_names(hf, config)
    if not config.share_embeddings:
        names["tgt_embed.weight"] = target
    if not config.tie_output:
        names["out_proj.weight"] = "lm_head.weight"
    for side, column in (("encoder", 0), ("decoder", 1)):
        for i in range(config.n_layers):
            for hf_name, ours in _LAYER.items():
                if ours[column] is None:
                    continue
                for param in ("weight", "bias"):
                    names[f"{side}.layers.{i}.{ours[column]}.{param}"] = f"{side}.layers.{i}.{hf_name}.{param}"
    return names


def convert_weights(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face tensor names (`model.` prefixes dropped) -> attnlab's (positions recomputed)."""
    out = {ours: hf.get(theirs) for ours, theirs in weight_names(hf, config).items()}
    bias = out["logits_bias"]  # (1, target vocab) in the file
    out["logits_bias"] = torch.zeros(config.target_vocab) if bias is None else bias.reshape(-1)
    return out


def mismatch(name: str, tensor: torch.Tensor | None, shape: tuple[int, ...], fits: bool) -> str:
    """What is wrong with the file's tensor `name`, whose place in the model has `shape` (in the
    file's layout) and which `fits` that place or not."""
    if tensor is None:
        return f"{name} missing"
    if not fits:
        said = ", ".join(map(str, tensor.shape)), ", ".join(map(str, shape))
        return f"{name} has shape ({said[0]}), config.json implies ({said[1]})"
    return f"{name} holds {tensor.dtype} values, not floating point"


def check_vocabularies(directory: Path, config: ModelConfig, source: Any, target: Any, separate: bool) -> None:
    """Refuse tokenizers (`attnlab.data.vocab.VocabTokenizer`s, built by the caller: this room
    knows no data code) that give ids outside the model's vocabularies, and one vocabulary
    for a model whose sides' differ in size: every translation would fail later, far from the
    cause, or come out in other words. `separate`: the target side reads target_vocab.json."""
    target_file = "target_vocab.json" if separate else "vocab.json"
    if not separate and config.target_vocab != config.vocab_size:
        raise CheckpointError(
            f"{directory / 'config.json'} gives the output a vocabulary of {config.target_vocab:,} (decoder_vocab_size)"
            f" and the input one of {config.vocab_size:,}, and no target_vocab.json is read (separate_vocabs)"
        )
    for tokenizer, size, name in (
        (source, config.vocab_size, "vocab.json"),
        (target, config.target_vocab, target_file),
    ):
        if tokenizer.get_piece_size() > size:
            raise CheckpointError(
                f"{directory / name} has ids up to {tokenizer.get_piece_size() - 1:,}"
                f" but config.json a vocabulary of {size:,} (the files of another model?)"
            )


def read_marian(directory: str | Path) -> tuple[Transformer, dict[str, Any]]:
    """(model in eval mode, fp32; what the directory says about itself) for a Marian directory."""
    directory = Path(directory)
    hf = read_hf_config(directory)
    config, about = marian_config(hf), about_model(hf)  # before the weights are read
    files = read_weights(directory)
    hf_weights = {name.removeprefix("model."): tensor for name, tensor in files.items()}
    encoder, decoder = embedding_tables(hf_weights, config)
    if config.share_embeddings and encoder is not None and decoder is not None and not torch.equal(encoder, decoder):
        config = config.replace(share_embeddings=False)  # one vocabulary, a table per side
    weights, names = convert_weights(hf_weights, config), weight_names(hf_weights, config)
    # Refusals name each tensor as the user's file does: `model.` where the file has it (a missing
    # one where the file's others have it), never on the two that MarianMTModel keeps outside.
    prefix = "model." if any(name.startswith("model.") for name in files) else ""
    in_file = {name.removeprefix("model."): name for name in files}
    named = {k: in_file.get(v) or f"{'' if v in TOP_LEVEL else prefix}{v}" for k, v in names.items()}
    with torch.device("meta"):  # shapes only: a config.json naming d_model 131072 allocated 30 GB here
        expected = {k: v.shape for k, v in Transformer(config).state_dict().items()}
    fits = {k: weights.get(k) is not None and weights[k].shape == expected[k] for k in expected}
    wrong = [k for k in expected if not fits[k] or not weights[k].is_floating_point()]  # in the model's order
    if wrong:
        first, others = wrong[0], len({names[k] for k in wrong}) - 1
        shape = (1, *expected[first]) if first == "logits_bias" else tuple(expected[first])
        said = mismatch(named[first], hf_weights.get(names[first]), shape, fits[first])
        more = f"; {others} more tensor{'s' if others > 1 else ''} differ{'' if others > 1 else 's'}" if others else ""
        raise CheckpointError(f"{directory}: weights do not match config.json ({said}{more})")
    check_weights({named[k]: weights[k] for k in expected}, directory)
    model = Transformer(config)
    model.load_state_dict({k: weights[k].float() for k in expected})
    return model.eval(), about


def about_model(hf: dict[str, Any]) -> dict[str, Any]:
    """What the directory says about itself (for the model card and the checkpoint's meta), each
    value checked: a `_name_or_path` of "\\ud800" (no UTF-8 text) failed the card's write with a
    UnicodeEncodeError traceback, and a mapping for a name or a NaN dropout went into meta silently."""
    for key in ("_name_or_path", "transformers_version"):
        if hf.get(key) is not None and not is_text(hf[key]):
            raise ConfigError(f"Marian setting {key}={hf[key]!r:.60} must be text (a string UTF-8 can write)")
    architectures = [] if hf.get("architectures") is None else hf["architectures"]
    if not isinstance(architectures, list) or not all(is_text(name) for name in architectures):
        raise ConfigError(f"Marian setting architectures={architectures!r:.60} must be a list of class names")
    dropout = hf["dropout"]
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:  # (NaN fails)
        raise ConfigError(f"Marian setting dropout={dropout!r:.60} must be a number from 0 to below 1")
    return {
        "name_or_path": hf.get("_name_or_path") or "",
        "architectures": architectures,
        "dropout": dropout,
        "transformers_version": hf.get("transformers_version"),
    }


def is_text(value: object) -> bool:
    """A string UTF-8 can write: JSON's "\\ud800" reads as a lone surrogate, which it cannot."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
