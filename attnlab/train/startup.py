"""What `Trainer` checks before it spends minutes building a model and hours training it: every
setting below once failed late (at the first checkpoint, a thousand updates in, or after the
model was built) or measured something else without a word. Each check is one line.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.data.prepared import ParallelData
from attnlab.data.staging import hold
from attnlab.errors import ConfigError
from attnlab.model.config import MAX_SIZES, PRESETS, ModelConfig, preset, resolve_device
from attnlab.model.cpu import BF16_EMULATED, bf16_products
from attnlab.model.memory import out_of_memory
from attnlab.model.transformer import Transformer, count_parameters
from attnlab.train.dev import alignment_pairs
from attnlab.train.recipes import preset_defaults
from attnlab.train.regime import compile_setting, make_optimizer

BYTES_PER_PARAMETER = 16  # fp32 weights, gradients and Adam's two moments, before any activation


def check_settings(cfg: Any) -> None:
    """A TrainConfig's fields made what its checkpoints store as JSON, or one line: `data=Path(...)`
    (a path, as every other attnlab function takes) trained until the first checkpoint and then
    failed to write it (TypeError: PosixPath is not JSON serializable), as NumPy numbers did;
    `overrides=None` was a TypeError when the model was made; `skip_nonfinite="no"` skipped.
    `data` is made absolute."""
    for item in dataclasses.fields(cfg):  # NumPy's numbers as Python's, as ModelConfig takes them
        setattr(cfg, item.name, _plain(getattr(cfg, item.name)))
    for name in ("data", "out"):
        if not isinstance(getattr(cfg, name), str | os.PathLike):
            raise ConfigError(f"{name} must be a path, got {getattr(cfg, name)!r}")
        setattr(cfg, name, os.fsdecode(getattr(cfg, name)))
    if cfg.data:  # as a checkpoint stores it: a run resumed from another directory looked for "prep/m30k" there
        cfg.data = os.path.abspath(cfg.data)
    strings = ("preset", "dtype", "device", "align_gold") + (() if isinstance(cfg.compile, bool) else ("compile",))
    for name in strings:  # (compile may be a flag: run configs before 2026-12 stored one)
        if not isinstance(getattr(cfg, name), str):
            raise ConfigError(f"{name} must be a string, got {getattr(cfg, name)!r}")
    if not isinstance(cfg.skip_nonfinite, bool):
        raise ConfigError(f"skip_nonfinite must be True or False, got {cfg.skip_nonfinite!r}")
    if not isinstance(cfg.overrides, dict) or not all(isinstance(key, str) for key in cfg.overrides):
        raise ConfigError(f"overrides must be a dict of model config keys to values, got {cfg.overrides!r}")
    cfg.overrides = {key: _plain(value) for key, value in cfg.overrides.items()}
    check_choices(cfg)


def check_choices(cfg: Any) -> None:
    """The compile mode, dtype, device, preset and overrides, checked as `Trainer` checks them, or
    one line: each was refused only by `Trainer`, and a bad compile mode after --out was made."""
    compile_setting(cfg.compile)
    if cfg.dtype not in ("auto", "fp32", "bf16"):
        raise ConfigError(f"dtype must be fp32, bf16 or auto, got {cfg.dtype!r}")
    resolve_device(cfg.device)
    # The data's vocabulary is read by Trainer; till then the largest one a model takes stands in,
    # so a special id inside the data's vocabulary is not refused for the preset's.
    preset(cfg.preset, **{"vocab_size": cfg.overrides.get("tgt_vocab_size", MAX_SIZES["vocab_size"]), **cfg.overrides})


def fill_defaults(cfg: Any) -> None:
    """The run settings left None (`max_steps`, `max_tokens`, `keep_last`) as the preset's
    (`preset_defaults`), its batch shared by torchrun's processes and the update's micro-batches."""
    freq = cfg.update_freq if isinstance(cfg.update_freq, int) else 1  # (a bad one is refused next)
    for name, value in preset_defaults(cfg.preset, int(os.environ.get("WORLD_SIZE", "1")) * freq).items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)


def check_numbers(cfg: Any) -> None:
    """One line for a setting that would crash later (a ZeroDivisionError at the first log line)
    or train something else without a word: a negative learning-rate scale is gradient ascent, a
    negative clip norm flips every gradient."""
    at_least = {"max_steps": 1, "save_every": 1, "log_every": 1, "warmup": 1, "max_tokens": 1, "update_freq": 1}
    at_least |= {"keep_last": 0, "seed": 0, "eval_sentences": 0, "probes": 0, "align_pairs": 0}
    # Past these, an OverflowError after the run directory was made: torch.manual_seed takes 64 bits,
    # the batcher divides by int64 sizes; and 2**31 tokens a micro-batch is TBs of activations anyway.
    at_most = {"seed": 2**64 - 1, "max_tokens": 2**31 - 1}
    for name, low in at_least.items():
        value, high = getattr(cfg, name), at_most.get(name, math.inf)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            up_to = f" and ≤ {high:,}" if name in at_most else ""
            raise ConfigError(f"{name} must be a whole number ≥ {low}{up_to}, got {value!r}")
    for name, positive in (("lr_scale", True), ("clip_norm", False), ("max_minutes", False)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if value < 0 or (positive and value == 0):
            raise ConfigError(f"{name} must be {'> 0' if positive else '≥ 0 (0: off)'}, got {value!r}")


def _plain(value: Any) -> Any:
    """A NumPy integer or real number as Python's int or float; anything else as it is."""
    if isinstance(value, numbers.Integral) and type(value) not in (bool, int):
        return int(value)
    if isinstance(value, numbers.Real) and type(value) not in (bool, int, float):
        return float(value)
    return value


RUN_FILES = {"checkpoints", "metrics.jsonl", "probes"}  # what a run directory holds (one killed early: some)


def check_out(out: Path) -> None:
    """Create the run directory now: a path that cannot be one (`/proc/x`, under a file, no
    permission) failed only after the model was built (a FileNotFoundError traceback)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; name a run directory (a new one, or a run to resume)")
    if (out / "manifest.json").is_file():  # a run grew inside a shipped checkpoint, which kept its old model
        raise ConfigError(
            f"--out {out} is a checkpoint, not a run; name a run directory (a new one, or a run to resume)"
        )
    others = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if others and not RUN_FILES & set(others):  # a run's checkpoints/ went in among a user's own files
        raise ConfigError(
            f"--out {out} holds other files ({', '.join(others[:3])}{', …' if len(others) > 3 else ''}) and no run; "
            "name a run directory (a new one, or a run to resume)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"--out {out} cannot be created ({error.strerror or error}); name another run directory"
        ) from None
    try:  # a run to resume that this user may not write (another's): a traceback from its metrics log
        tempfile.TemporaryFile(dir=out).close()
    except OSError as error:
        raise ConfigError(
            f"--out {out} cannot be written ({error.strerror or error}); name another run directory"
        ) from None


@contextmanager
def holding(out: Path) -> Iterator[None]:
    """`out` held by this run while it trains: two runs on one --out both wrote checkpoints into it
    and every line of metrics.jsonl twice; the second is refused in one line. The lock ends with
    the run (or its process, however it ends: a killed run leaves none), so a resume, in a new
    process or the same notebook, takes it again. Only rank 0 writes --out and takes it: ranks
    never lock each other out. A file system that cannot lock a directory runs unlocked, as before."""
    try:
        held = hold(out)
    except BlockingIOError:
        raise ConfigError(
            f"--out {out} is in use by another `attnlab train` run; wait for it to end or name another run directory"
        ) from None
    except OSError:
        held = None
    try:
        yield
    finally:
        if held is not None:
            os.close(held)


def check_align_gold(name: str, meta: dict[str, Any]) -> None:
    """The alignment set must be of the data's language pair, in either direction: Zh-En links
    read on an EN→DE model gave a dev_aer at every checkpoint that measured nothing. A set given
    as a STEM path has unknown languages and is taken as it is."""
    languages = alignment_pairs(name)[2]  # also: the set exists and reads, found now, not a thousand updates on
    pair = (meta.get("src_lang"), meta.get("tgt_lang"))
    if languages != ("", "") and languages not in (pair, pair[::-1]):
        raise ConfigError(
            f"--align-gold {name} links {'-'.join(languages)} sentences, but the data is "
            f"{pair[0] or '?'}→{pair[1] or '?'}; choose a set of the data's languages (or none)"
        )


def check_lengths(train: ParallelData, cfg: Any, config: ModelConfig) -> None:
    """Every training pair and the dev pairs the run will read at each checkpoint (the first
    `eval_sentences` and `probes` of the valid split) must fit the model, each side with its
    </s> or <s> in max_len positions. A longer one failed only when a batch drew it (training) or
    at the first checkpoint's dev report, and again at every resume. A dev pair is refused, not
    skipped: the dev numbers stay those of the first N pairs, comparable between runs."""
    room = config.max_len - 1
    longest = max(int(train.src_lens.max(initial=0)), int(train.tgt_lens.max(initial=0)))
    if longest > room:
        raise ConfigError(
            f"{train.dir} has training pairs with up to {longest} tokens on a side, more than the model's max_len="
            f"{config.max_len} takes ({room} + </s>); prepare the data with `attnlab data prepare ... "
            f"--max-len {room}` or give the model max_len={longest + 1}"
        )
    wanted = max(cfg.eval_sentences, cfg.probes)
    if wanted == 0:
        return
    valid = ParallelData(train.dir, "valid")
    n = min(wanted, len(valid))
    too_long = np.flatnonzero(np.maximum(valid.src_lens[:n], valid.tgt_lens[:n]) > room)
    if too_long.size:
        i = int(too_long[0])
        src, tgt = int(valid.src_lens[i]), int(valid.tgt_lens[i])
        raise ConfigError(
            f"valid pair {i} of {train.dir} has {src} source and {tgt} target tokens, more than the "
            f"model's max_len={config.max_len} takes ({room} + </s>), and the dev report at each checkpoint "
            f"reads it; evaluate fewer pairs (--eval-sentences {min(cfg.eval_sentences, i)} --probes "
            f"{min(cfg.probes, i)}) or give the model max_len={max(src, tgt) + 1}"
        )


def parameters_of(config: ModelConfig) -> int:
    """The parameter count of `config` without allocating it: one and two layers built on the
    meta device (no memory, any size) give the count per layer."""
    with torch.device("meta"):
        one = count_parameters(Transformer(config.replace(n_layers=1)))
        two = count_parameters(Transformer(config.replace(n_layers=2)))
    return one + (config.n_layers - 1) * (two - one)


def free_memory(device: torch.device) -> int | None:
    """Bytes this process can still allocate on `device` (None: unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    available = [line.split()[1] for line in lines if line.startswith("MemAvailable:")]
    return int(available[0]) * 1024 if available else None


def check_fits(config: ModelConfig, device: torch.device) -> int:
    """The parameter count, or one line when weights, gradients and Adam's moments alone exceed
    the free memory: `n_layers=1000000` built layers for minutes before the kernel killed it.
    Checked before --out is created, so a refused run leaves no empty run directory."""
    params = parameters_of(config)
    # On the CPU the processes torchrun starts on this machine share its memory (GPUs: one each).
    sharing = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if device.type == "cpu" else 1
    need, free = params * BYTES_PER_PARAMETER * sharing, free_memory(device)
    if free is not None and need > free:
        each = f" ({sharing} processes of this run share it)" if sharing > 1 else ""
        raise ConfigError(
            f"the model has {params:,} parameters: its weights, gradients and Adam's moments need "
            f"{need / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB free on {device}{each}; "
            "choose a smaller preset or overrides"
        )
    return params


def bf16_note(device: torch.device, bf16: bool) -> str | None:
    """One line when bf16 is asked for on a CPU without bf16 products (`bf16_products`): the
    recipes train in bf16, and there a `small` step takes ~30x as long as in fp32."""
    if bf16 and device.type == "cpu" and not bf16_products():
        return f"warning: {BF16_EMULATED}: a bf16 training step takes ~30x as long as in fp32 here; pass --dtype fp32"
    return None


def notes(cfg: Any, config: ModelConfig, device: torch.device, bf16: bool) -> tuple[str | None, ...]:
    """The lines a run starts with besides the compiler's, None where there is nothing to say."""
    return bf16_note(device, bf16), row_note(cfg, config)


def row_note(cfg: Any, config: ModelConfig) -> str | None:
    """One line when an override of d_model or n_heads makes d_k or d_v d_model/h again where the
    preset set them apart (Table 3's row B): `--preset B-dk16 d_model=64` trained d_k 8, the row's
    one change gone, and its log still said B-dk16. (A row whose d_k is d_model/h keeps the rule.)"""
    row = PRESETS[cfg.preset]
    if not {"d_model", "n_heads"} & set(cfg.overrides):
        return None
    apart = [name for name in ("d_k", "d_v") if getattr(row, name) != row.d_model // row.n_heads]
    lost = [f"{name}={getattr(row, name)}" for name in apart if getattr(config, name) != getattr(row, name)]
    if not lost:
        return None
    return (
        f"attnlab train: {cfg.preset} has {' '.join(lost)}; with these overrides d_k and d_v are d_model/h = "
        f"{config.d_model // config.n_heads}: give {' '.join(lost)} to keep the row"
    )


def build(config: ModelConfig, device: torch.device, params: int) -> tuple[Transformer, torch.optim.Adam]:
    """The model and its optimizer, or one line when an allocation fails (`d_ff=1000000000`
    within the estimate's reach, or memory taken meanwhile) instead of a DefaultCPUAllocator or
    CUDA out-of-memory traceback."""
    try:
        model = Transformer(config).to(device)
        return model, make_optimizer(model)
    except RuntimeError as error:
        if not out_of_memory(error):
            raise
        raise ConfigError(
            f"the model has {params:,} parameters: it does not fit in memory on {device}; "
            "choose a smaller preset or overrides"
        ) from None


def tokens_line(cfg: Any, world: int) -> str:
    """What one update reads, said at start-up: `max_tokens` is per process and micro-batch, so
    8 processes with the 1-GPU budget read 8× the paper's batch (§5.1: ~25,000 source and 25,000
    target tokens per batch, i.e. per update, across its 8 GPUs). The budget counts each pair at
    its longer side's length (`TokenBatchSampler`), so a side's real tokens are fewer: on Multi30k
    EN-FR at 25,000, a median 21,000 source and 24,000 target tokens (a faithfulness audit)."""
    total = cfg.max_tokens * world * cfg.update_freq
    return (
        f"up to {total:,} source and {total:,} target tokens per update, each pair counted at its longer side "
        f"(max_tokens {cfg.max_tokens:,} per process and micro-batch × {world} process(es) × update_freq "
        f"{cfg.update_freq}; the paper: ~25,000 each)"
    )
