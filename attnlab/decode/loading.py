"""Opening a checkpoint: `attnlab.load()`, which finds the model in what a user points at (a
checkpoint, a run, an imported or a Hugging Face Marian directory), checks that its parts belong
together, and readies its layers for the dtype asked (`attnlab.decode.api.Model` is what it returns).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from attnlab.data.tokenizer import load_tokenizer
from attnlab.data.vocab import marian_tokenizers, separate_vocabs
from attnlab.decode.api import DEFAULTS, Model
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.model.checkpoint import latest_valid, load_model, user_path
from attnlab.model.config import resolve_device
from attnlab.model.linear import for_inference, quantized
from attnlab.model.marian import check_vocabularies, is_marian, read_marian
from attnlab.model.transformer import Transformer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32}  # int8: fp32, then quantized


def load(path: str | Path, device: str = "cpu", dtype: str = "fp32") -> Model:
    """Open a checkpoint directory (a bundled model, RUN_DIR/checkpoints/step_N, an average,
    one made by `attnlab import marian`), a run directory (its newest valid checkpoint), or a
    Hugging Face Marian / OPUS-MT directory (converted in memory; nothing is downloaded); `~` is
    the home directory, as a shell reads it.

    `dtype="bf16"` computes in bfloat16: 1.5-2× the decoding speed on CPUs with bf16
    instructions, at the BLEU of docs/BENCHMARKS.md; `dtype="int8"` quantizes the linear layers'
    weights to int8 with dynamic activations (CPU only), one scale per product set by every row in
    it: a sentence's int8 translation can change slightly with the sentences batched beside it
    (not so in fp32 and bf16); fp32 is the default because the attention maps are then exact."""
    if not isinstance(dtype, str) or dtype not in DTYPES:  # ["fp32"]: "unhashable type: 'list'"
        raise AttnlabError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if not isinstance(path, str | os.PathLike):
        raise CheckpointError(f"expected a checkpoint directory's path, got {type(path).__name__}")
    if not str(path).strip():  # Path("") is "." and was searched as a run directory
        raise CheckpointError("expected a checkpoint directory's path, got an empty one")
    # Ordinary tensors even in a caller's inference_mode: the weights hash and packs read versions.
    with torch.inference_mode(False):
        return _open(user_path(path), str(resolve_device(device)), dtype)


def _open(path: Path, device: str, dtype: str) -> Model:
    if not (path / "manifest.json").exists() and is_marian(path):
        model, about = read_marian(path)
        meta = {"task": "translate", "tokenizer": "marian", "imported_from": {"marian": str(path), **about}}
        source, target = _tokenizers(path, meta)
        check_vocabularies(path, model.config, source, target, separate_vocabs(path))  # else every line fails later
        return Model(_for_dtype(model.to(device, DTYPES[dtype]), dtype), source, meta, str(path), target)
    if (path / "checkpoints").is_dir() and not (path / "manifest.json").exists():
        newest = latest_valid(path)
        if newest is None:
            raise AttnlabError(f"{path}: a run directory without a valid checkpoint")
        path = newest
    model, meta = load_model(path, device, dtype=DTYPES[dtype])
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k, {}), dict) for k in ("data", "imported_from")):
        raise CheckpointError(f"{path}/config.json: its meta is not a mapping (a damaged or edited checkpoint)")
    if not isinstance(task := meta.get("task", "translate"), str) or task not in DEFAULTS:  # "summarize": no
        raise CheckpointError(f"{path}/config.json: meta.task must be translate or parse, not {task!r}")
    source, target = _tokenizers(path, meta)
    if meta.get("tokenizer") != "marian" and source.get_piece_size() != model.config.vocab_size:
        raise CheckpointError(
            f"{path}: spm.model has {source.get_piece_size():,} pieces but the model a vocabulary of "
            f"{model.config.vocab_size:,} (a tokenizer of another model?)"
        )
    return Model(_for_dtype(model, dtype), source, meta, str(path), target)


def _for_dtype(model: Transformer, dtype: str) -> torch.nn.Module:
    """int8: quantized linear layers; fp32 and bf16: linear layers through oneDNN on packed
    weights on the CPU (`attnlab.model.linear`); the output projection is packed in all three."""
    return quantized(model) if dtype == "int8" else for_inference(model)


def _tokenizers(path: Path, meta: dict[str, Any]) -> tuple[Any, Any]:
    """(source, target) tokenizers: the shared sentencepiece model of attnlab's own checkpoints,
    or Marian's two sentencepiece models with their vocabulary files."""
    if meta.get("tokenizer") == "marian":
        return marian_tokenizers(path)
    tokenizer = load_tokenizer(path / "spm.model")
    return tokenizer, tokenizer
