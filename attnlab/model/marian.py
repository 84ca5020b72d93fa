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

import json
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from attnlab.errors import CheckpointError, ConfigError
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
# Settings a Marian config may carry that attnlab's model has no equivalent for, and the value
# under which they are harmless.
UNSUPPORTED = {
    "normalize_before": False,  # pre-norm variants
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}
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
    """A Hugging Face directory whose config.json says `model_type: marian`."""
    path = Path(directory) / "config.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("model_type") == "marian"
    except (OSError, ValueError, AttributeError):
        return False


def read_hf_config(directory: Path) -> dict[str, Any]:
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{directory}/config.json: not readable JSON ({type(error).__name__})") from None
    if not isinstance(config, dict) or config.get("model_type") != "marian":
        raise CheckpointError(f"{directory}: not a Hugging Face Marian model (config.json model_type)")
    return {**DEFAULTS, **config}


def marian_config(hf: dict[str, Any]) -> ModelConfig:
    """The `ModelConfig` of a Marian config.json, or a one-line `ConfigError` naming what differs."""
    for key, harmless in UNSUPPORTED.items():
        if key in hf and bool(hf[key]) != harmless:
            raise ConfigError(f"Marian setting {key}={hf[key]!r} is not supported (attnlab is post-norm, §3.1)")
    pairs = [("encoder_layers", "decoder_layers"), ("encoder_attention_heads", "decoder_attention_heads")]
    pairs.append(("encoder_ffn_dim", "decoder_ffn_dim"))
    for a, b in pairs:
        if hf.get(a) != hf.get(b):
            raise ConfigError(f"Marian setting {a}={hf.get(a)} differs from {b}={hf.get(b)}; attnlab needs them equal")
    activation = hf["activation_function"]
    if activation not in ACTIVATIONS:
        raise ConfigError(f"Marian setting activation_function={activation!r} is not supported")
    vocab, shared, pad, start = (
        hf[k] for k in ("vocab_size", "share_encoder_decoder_embeddings", "pad_token_id", "decoder_start_token_id")
    )
    target_vocab = vocab if shared else hf["decoder_vocab_size"] or vocab
    if start != pad:
        raise ConfigError(f"Marian setting decoder_start_token_id={start} is not the pad token {pad}")
    try:
        return ModelConfig(
            n_layers=hf["encoder_layers"],
            d_model=hf["d_model"],
            d_ff=hf["encoder_ffn_dim"],
            n_heads=hf["encoder_attention_heads"],
            p_drop=0.0,  # inference only; the original dropout stays in the model card
            eps_ls=0.0,
            vocab_size=vocab,
            tgt_vocab_size=None if shared else target_vocab,
            max_len=hf["max_position_embeddings"],
            pad_id=pad,
            bos_id=pad,
            eos_id=hf["eos_token_id"],
            activation=ACTIVATIONS[activation],
            pe_layout="halves",
            scale_embedding=bool(hf["scale_embedding"]),
            share_embeddings=bool(shared),
            tie_output=bool(hf["tie_word_embeddings"]),
            logits_bias=True,
        )
    except KeyError as missing:
        raise ConfigError(f"Marian config.json lacks {missing}") from None


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The directory's tensors, never unpickling anything but tensors."""
    safetensors, legacy = (directory / name for name in WEIGHT_FILES)
    if safetensors.is_file():
        try:
            return load_file(str(safetensors))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{safetensors}: not a safetensors file ({type(error).__name__})") from None
    if legacy.is_file():
        try:
            weights = torch.load(legacy, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise CheckpointError(f"{legacy}: refused; it is not plain tensors ({first[:160]})") from None
        if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
            raise CheckpointError(f"{legacy}: refused; it does not hold a dictionary of tensors")
        return weights
    raise CheckpointError(f"{directory}: no {' or '.join(WEIGHT_FILES)}")


def convert_weights(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Hugging Face tensor names -> attnlab's (`model.` prefixes dropped, positions recomputed)."""
    hf = {name.removeprefix("model."): tensor for name, tensor in hf.items()}
    out: dict[str, torch.Tensor] = {}
    source = hf.get("shared.weight", hf.get("encoder.embed_tokens.weight"))
    out["embed.weight"] = source
    if not config.share_embeddings:
        out["tgt_embed.weight"] = hf.get("decoder.embed_tokens.weight")
    if not config.tie_output:
        out["out_proj.weight"] = hf.get("lm_head.weight")
    bias = hf.get("final_logits_bias")
    out["logits_bias"] = torch.zeros(config.target_vocab) if bias is None else bias.reshape(-1)
    for side, column in (("encoder", 0), ("decoder", 1)):
        for i in range(config.n_layers):
            for hf_name, names in _LAYER.items():
                if names[column] is None:
                    continue
                for param in ("weight", "bias"):
                    out[f"{side}.layers.{i}.{names[column]}.{param}"] = hf.get(f"{side}.layers.{i}.{hf_name}.{param}")
    return out


def read_marian(directory: str | Path) -> tuple[Transformer, dict[str, Any]]:
    """(model in eval mode, fp32; what the directory says about itself) for a Marian directory."""
    directory = Path(directory)
    hf = read_hf_config(directory)
    config = marian_config(hf)
    model = Transformer(config)
    weights = convert_weights(read_weights(directory), config)
    expected = model.state_dict()
    wrong = sorted(k for k in expected if weights.get(k) is None or weights[k].shape != expected[k].shape)
    if wrong:
        raise CheckpointError(f"{directory}: weights do not match config.json ({wrong[0]} missing or misshapen)")
    model.load_state_dict({k: weights[k].float() for k in expected})
    about = {
        "name_or_path": hf.get("_name_or_path", ""),
        "architectures": hf.get("architectures", []),
        "dropout": hf.get("dropout"),
        "transformers_version": hf.get("transformers_version"),
    }
    return model.eval(), about
