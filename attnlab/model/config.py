"""Model configuration in the paper's names, with presets that mirror its tables.

`base` and `big` are the two models of Table 2; every row of Table 3 is a preset named after its
row (`A-h1` ... `E-learned`), so an experiment from the paper is one `--preset` away. `parse` is
§6.3's 4-layer, d_model 1024 parser; `small` is the model the bundled Multi30k translator uses;
`tiny` exists for tests.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from attnlab.errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "swish")  # the FFN's non-linearity: the paper's ReLU, and Marian's others


MAX_POSITIONS = 65_536  # an edited config.json once named 2^40 and the model tried to allocate 8 TB
# The position table (max_len × d_model, built with every model, in no weights file): a 4 MB
# checkpoint naming d_model 2^16 and max_len 2^16 made loading ask for 17 GB (a traceback, or an
# explorer server killed). 2^25 values (128 MB) is d_model 512 at MAX_POSITIONS, 32× the paper's big.
MAX_POSITION_TABLE = 2**25
# Far past any published model (~128 layers and 128 heads, d_ff 73,728, vocabularies of ~256k
# pieces), yet every product of two stays far inside torch's int64 sizes: vocab_size 2^63 was a
# 40-line overflow traceback from torch.empty, and 10^9 layers an endless build.
MAX_SIZES = {"n_layers": 1024, "n_heads": 1024, "d_model": 2**20, "d_ff": 2**20, "d_k": 2**20, "d_v": 2**20}
MAX_SIZES |= {"vocab_size": 2**24, "tgt_vocab_size": 2**24}


def _whole(value: object) -> bool:
    """An int and not a bool: JSON's `true` and Python's True are ints to `isinstance`."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_size(name: str, value: object) -> None:
    """A positive whole number, at most `MAX_SIZES[name]` where there is one."""
    if not _whole(value) or value < 1:  # type: ignore[operator]
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if value > MAX_SIZES.get(name, value):  # type: ignore[operator]
        raise ConfigError(f"{name} must be at most {MAX_SIZES[name]:,}, far past any published model, got {value:,}")


@dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of the Transformer (§3, Table 3 column names).

    `d_k`/`d_v` default to d_model / n_heads as in §3.2.2; Table 3 row B changes d_k alone,
    which is why they are separate fields.
    """

    n_layers: int = 6  # N, both stacks (§3.1)
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int | None = None  # None: d_model // n_heads
    d_v: int | None = None
    p_drop: float = 0.1  # residual and embedding dropout (§5.4)
    # Dropout on the attention weights while training (tensor2tensor's attention_dropout): §5.4
    # names none for translation; §6.3 tuned "both attention and residual" dropout for parsing.
    p_attn_drop: float = 0.0
    eps_ls: float = 0.1  # label smoothing (§5.4); a training setting stored with the model
    positional: str = "sinusoidal"  # or "learned" (Table 3 row E)
    vocab_size: int = 37000  # one shared source/target BPE vocabulary (§5.1)
    max_len: int = 1024  # longest sequence the model accepts (learned positions need a bound)
    norm: str = "post"  # "post" is the paper's LayerNorm(x + Sublayer(x)); "pre" is opt-in
    pad_id: int = 0
    bos_id: int = 2  # decoder start; Marian starts from the pad token (bos_id == pad_id)
    eos_id: int = 3
    # Details that published Marian / OPUS-MT models differ in (`attnlab import marian`). The
    # defaults are the paper's; no preset changes them.
    activation: str = "relu"  # FFN non-linearity (§3.3); OPUS-MT uses "swish" (SiLU), others "gelu"
    pe_layout: str = "interleaved"  # sin/cos channels interleaved (§3.5), or "halves": sines, then cosines
    scale_embedding: bool = True  # embeddings × √d_model (§3.4)
    share_embeddings: bool = True  # one source/target embedding matrix (§3.4)
    tgt_vocab_size: int | None = None  # the decoder's own vocabulary; None: vocab_size (shared)
    tie_output: bool = True  # pre-softmax matrix = the target embedding matrix (§3.4)
    logits_bias: bool = False  # a bias added to the logits (Marian's final_logits_bias)
    # Biases in W^Q, W^K, W^V and W^O: §3.2.2's projections have none (tensor2tensor: use_bias=False);
    # Marian's have them, and so did every attnlab model before this field (`from_dict`).
    attn_bias: bool = False
    # Restricted self-attention (Table 1's last row, §4): the encoder attends within distance r
    # (a window of 2r + 1: §4's "neighborhood of size r" centred on the position is r // 2 here),
    # the decoder to the previous r positions and itself; encoder-decoder attention stays global.
    attn_window: int | None = None  # r; None: global (the paper's models)
    # What the paper reports for this configuration (Table 3), for comparison only.
    paper: dict[str, float] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for item in fields(self):  # NumPy's numbers as Python's: a config is written as JSON
            value = getattr(self, item.name)
            if isinstance(value, numbers.Integral) and type(value) not in (bool, int):
                object.__setattr__(self, item.name, int(value))
            elif isinstance(value, numbers.Real) and type(value) not in (bool, int, float):  # np.float64 too
                object.__setattr__(self, item.name, float(value))
        for name in ("d_model", "n_heads"):  # checked before d_model % n_heads divides by them
            _check_size(name, getattr(self, name))
        if self.d_k is None or self.d_v is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"n_heads={self.n_heads} does not divide d_model={self.d_model}; give d_k and d_v explicitly"
                )
            for name in ("d_k", "d_v"):  # None follows d_model / h; 0 is refused below, not replaced
                if getattr(self, name) is None:
                    object.__setattr__(self, name, self.d_model // self.n_heads)
        for name in ("n_layers", "d_ff", "d_k", "d_v", "vocab_size", "max_len"):
            _check_size(name, getattr(self, name))
        if not 2 <= self.max_len <= MAX_POSITIONS:
            raise ConfigError(
                f"max_len must be from 2 (a token and </s>, or <s> and one output) to {MAX_POSITIONS:,} "
                f"(each position is a row of the position table built with the model), got {self.max_len:,}"
            )
        if self.max_len * self.d_model > MAX_POSITION_TABLE:
            raise ConfigError(
                f"max_len × d_model must be at most {MAX_POSITION_TABLE:,} values (the position table built with the "
                f"model), got {self.max_len:,} × {self.d_model:,}; lower max_len"
            )
        for name in ("p_drop", "p_attn_drop", "eps_ls"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be a number in [0, 1), got {value!r}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ConfigError(f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.norm not in ("post", "pre"):
            raise ConfigError(f"norm must be 'post' (the paper's) or 'pre', got {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if self.pe_layout not in ("interleaved", "halves"):
            raise ConfigError(f"pe_layout must be 'interleaved' (the paper's) or 'halves', got {self.pe_layout!r}")
        for name in ("scale_embedding", "share_embeddings", "tie_output", "logits_bias", "attn_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.attn_window is not None and (not _whole(self.attn_window) or self.attn_window < 0):
            raise ConfigError(f"attn_window must be a non-negative integer or None, got {self.attn_window!r}")
        if self.tgt_vocab_size is not None:  # (None: the source's)
            _check_size("tgt_vocab_size", self.tgt_vocab_size)
            if self.share_embeddings and self.tgt_vocab_size != self.vocab_size:
                raise ConfigError("shared embeddings need one vocabulary: tgt_vocab_size must equal vocab_size")
        for name in ("pad_id", "bos_id", "eos_id"):  # `true` decoded from id 1, silently, and 2.0 failed in a kernel
            if not _whole(getattr(self, name)):
                raise ConfigError(f"{name} must be a whole number, got {getattr(self, name)!r}")
        specials = (self.pad_id, self.bos_id, self.eos_id)
        if min(specials) < 0 or max(specials) >= min(self.vocab_size, self.target_vocab):
            last = min(self.vocab_size, self.target_vocab) - 1
            raise ConfigError(f"pad_id, bos_id and eos_id must be ids inside the vocabulary (0 to {last:,})")
        if self.eos_id in (self.pad_id, self.bos_id):
            raise ConfigError("eos_id must differ from pad_id and bos_id (bos_id may equal pad_id, as in Marian)")

    @property
    def target_vocab(self) -> int:
        """Size of the decoder's vocabulary (the logits' last dimension)."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with `changes` applied; d_k/d_v follow d_model/n_heads unless given."""
        current = self.to_dict()
        if ("d_model" in changes or "n_heads" in changes) and "d_k" not in changes:
            current["d_k"] = None
        if ("d_model" in changes or "n_heads" in changes) and "d_v" not in changes:
            current["d_v"] = None
        current.pop("paper")
        current.update(changes)
        return ModelConfig.from_dict(current)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """The config `data` (config.json's object) describes; not a dict of field names is one
        line (None or a list was a TypeError from joining its keys)."""
        if not isinstance(data, dict) or not all(isinstance(key, str) for key in data):
            raise ConfigError(f"a model config is a mapping of field names to values, got {data!r:.80}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        if "d_model" in data and "attn_bias" not in data:  # a config.json written before the field: it had them
            data = {**data, "attn_bias": True}
        return cls(**data)


def _variant(base: ModelConfig, paper: dict[str, float], **changes: Any) -> ModelConfig:
    return dataclasses.replace(base.replace(**changes), paper=paper)


_BASE = ModelConfig(paper={"params_millions": 65, "ppl_dev": 4.92, "bleu_dev": 25.8, "train_steps": 100_000})

PRESETS: dict[str, ModelConfig] = {
    "base": _BASE,
    "big": _variant(
        _BASE,
        {"params_millions": 213, "ppl_dev": 4.33, "bleu_dev": 26.4, "train_steps": 300_000},
        d_model=1024,
        d_ff=4096,
        n_heads=16,
        p_drop=0.3,
    ),
    # Table 3 leaves "params" blank in rows A, D and E: "unlisted values are identical to those of
    # the base model", so 65M there.
    # (A) heads, keeping computation constant: d_k = d_v = d_model / h
    "A-h1": _variant(_BASE, {"params_millions": 65, "ppl_dev": 5.29, "bleu_dev": 24.9}, n_heads=1),
    "A-h4": _variant(_BASE, {"params_millions": 65, "ppl_dev": 5.00, "bleu_dev": 25.5}, n_heads=4),
    "A-h16": _variant(_BASE, {"params_millions": 65, "ppl_dev": 4.91, "bleu_dev": 25.8}, n_heads=16),
    "A-h32": _variant(_BASE, {"params_millions": 65, "ppl_dev": 5.01, "bleu_dev": 25.4}, n_heads=32),
    # (B) smaller attention keys; d_v stays 64
    "B-dk16": _variant(_BASE, {"params_millions": 58, "ppl_dev": 5.16, "bleu_dev": 25.1}, d_k=16, d_v=64),
    "B-dk32": _variant(_BASE, {"params_millions": 60, "ppl_dev": 5.01, "bleu_dev": 25.4}, d_k=32, d_v=64),
    # (C) model size
    "C-N2": _variant(_BASE, {"params_millions": 36, "ppl_dev": 6.11, "bleu_dev": 23.7}, n_layers=2),
    "C-N4": _variant(_BASE, {"params_millions": 50, "ppl_dev": 5.19, "bleu_dev": 25.3}, n_layers=4),
    "C-N8": _variant(_BASE, {"params_millions": 80, "ppl_dev": 4.88, "bleu_dev": 25.5}, n_layers=8),
    "C-d256": _variant(_BASE, {"params_millions": 28, "ppl_dev": 5.75, "bleu_dev": 24.5}, d_model=256, d_k=32, d_v=32),
    "C-d1024": _variant(
        _BASE, {"params_millions": 168, "ppl_dev": 4.66, "bleu_dev": 26.0}, d_model=1024, d_k=128, d_v=128
    ),
    "C-ff1024": _variant(_BASE, {"params_millions": 53, "ppl_dev": 5.12, "bleu_dev": 25.4}, d_ff=1024),
    "C-ff4096": _variant(_BASE, {"params_millions": 90, "ppl_dev": 4.75, "bleu_dev": 26.2}, d_ff=4096),
    # (D) regularisation
    "D-drop0": _variant(_BASE, {"params_millions": 65, "ppl_dev": 5.77, "bleu_dev": 24.6}, p_drop=0.0),
    "D-drop0.2": _variant(_BASE, {"params_millions": 65, "ppl_dev": 4.95, "bleu_dev": 25.5}, p_drop=0.2),
    "D-ls0": _variant(_BASE, {"params_millions": 65, "ppl_dev": 4.67, "bleu_dev": 25.3}, eps_ls=0.0),
    "D-ls0.2": _variant(_BASE, {"params_millions": 65, "ppl_dev": 5.47, "bleu_dev": 25.7}, eps_ls=0.2),
    # (E) learned positional embeddings instead of sinusoids
    "E-learned": _variant(_BASE, {"params_millions": 65, "ppl_dev": 4.92, "bleu_dev": 25.7}, positional="learned"),
    # §6.3: "a 4-layer transformer with d_model = 1024", 16K vocabulary for WSJ only; dropout
    # ("both attention and residual"), learning rates and beam size were tuned on Section 22, "all
    # other parameters unchanged from the English-to-German base translation model": d_ff 2048,
    # h = 8 (so d_k = d_v = 1024 / 8 = 128). The tuned values are not in the paper; these dropouts
    # are tensor2tensor's transformer_parsing_base's (which also warms up over 16,000 steps and
    # unties the softmax: not here).
    "parse": _variant(
        _BASE,
        {"f1_wsj23": 91.3},
        n_layers=4,
        d_model=1024,
        d_k=128,
        d_v=128,
        vocab_size=16000,
        p_drop=0.2,
        p_attn_drop=0.2,
    ),
    # Not in the paper: sizes that train on a laptop CPU (the bundled models) and in tests.
    "small": _variant(_BASE, {}, n_layers=3, d_model=256, d_ff=1024, n_heads=4, vocab_size=8000, p_drop=0.3),
    "tiny": _variant(_BASE, {}, n_layers=2, d_model=64, d_ff=128, n_heads=4, vocab_size=1000, max_len=256),
}
# Table 1's last row on the `small` shape: self-attention restricted to a neighbourhood of r.
PRESETS |= {f"small-r{r}": _variant(PRESETS["small"], {}, attn_window=r) for r in (1, 3, 5, 8)}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """The named preset with `overrides` applied (unknown names and keys are one-line errors)."""
    if not isinstance(name, str) or name not in PRESETS:  # (["base"] was a TypeError: unhashable type)
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    config = PRESETS[name]
    if not overrides:
        return config
    return dataclasses.replace(config.replace(**overrides), paper=config.paper)


def parse_overrides(items: list[str], flags: Sequence[str] = ()) -> dict[str, Any]:
    """`["d_model=256", "p_drop=0.3"]` -> typed overrides, typed by the field's default. A
    command passes what its parser left over; an item there that looks like a flag (`--tgt`) is
    a misspelt or shortened one of its `flags`, and the error names the nearest. A key given
    twice (`d_model=256 d-model=512`, one key however spelt) is refused: the last one was kept
    without a word. (A recipe's overrides are merged by the caller: a key here replaces one there.)"""
    types = {f.name: f.type for f in fields(ModelConfig)}
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # key -> the item that gave it
    for item in items:
        key, sep, raw = item.lstrip("-").partition("=")
        key = key.replace("-", "_")
        if not sep and item.startswith("-"):
            close = [f for f in flags if f.startswith(item)] or difflib.get_close_matches(item, flags, 1)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(f"unrecognized option {item}{hint}; flags are spelled in full")
        if not sep:
            raise ConfigError(f"override {item!r} is not KEY=VALUE")
        if key not in types or key == "paper":
            raise ConfigError(f"unknown config key {key!r} in override {item!r}")
        if key in given:
            raise ConfigError(f"override {key} is given twice ({given[key]} and {item}); give it once")
        given[key] = item
        kind = types[key]
        try:
            if "bool" in str(kind):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                out[key] = raw.lower() in ("true", "1")
            elif "int" in str(kind):
                out[key] = None if raw.lower() == "none" else int(raw)
            elif "float" in str(kind):
                out[key] = float(raw)
            else:
                out[key] = raw
        except ValueError:
            raise ConfigError(f"override {item!r}: {raw!r} is not a valid {kind}") from None
    return out


def resolve_device(name: str) -> torch.device:
    """The torch.device `name` names ("auto": the GPU when one is visible, else the CPU), or a
    one-line ConfigError where this machine has none such: torch itself raises an assertion
    ("Torch not compiled with CUDA enabled") on the first tensor moved there, or lists every
    device type it knows for a misspelt one."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device must be cpu, cuda, cuda:N, mps or auto, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name}: no GPU is visible to this torch; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name}: only {torch.cuda.device_count()} GPU(s) are visible")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name}: this machine has no Apple GPU; use cpu")
    if device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {name}: attnlab runs on cpu, cuda or mps")
    return device
