"""Checkpoints on disk: safetensors + JSON only, written atomically, verified when read.

A checkpoint directory holds

    model.safetensors    the weights (fp32 while training; bf16 for bundled models)
    config.json          the ModelConfig
    spm.model            the shared sentencepiece vocabulary
    trainer.safetensors  optimizer tensors and RNG state (training checkpoints only)
    trainer.json         step, schedule, data-iterator position, metrics (training only)
    manifest.json        size and sha256 of every file above, written last (`manifest`)

It is assembled in a temporary sibling directory and renamed into place (swapped with the one
it replaces in one step where Linux can: `publish`), so a killed write leaves no directory that
looks valid; the manifest catches truncation afterwards. A write that
fails (a full disk) removes its temporary directory and raises a one-line `CheckpointError`;
checkpoints already published are never touched by it. Nothing is ever unpickled: a file that
is not safetensors/JSON is refused.

A run directory keeps its checkpoints as `RUN_DIR/checkpoints/step_N`; `latest_valid` finds the
newest one that verifies (what resuming and `attnlab.load(RUN_DIR)` open).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from attnlab.errors import CheckpointError, ConfigError, json_loads, warn
from attnlab.model.config import ModelConfig
from attnlab.model.manifest import MANIFEST, VERSION, check_tokenizer, sha256_of, verify
from attnlab.model.transformer import Transformer
from attnlab.publish import assembly_directory, link_or_copy, open_modes, publish, why_not_written

STEP_DIR = re.compile(r"^step_(\d+)$")
_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.")


def refuse_existing(out: Path, force: bool) -> None:
    """`import`, `export` and `average` replace `--out` only when told to (`--force`), and then
    only a directory: a mistyped `--out checkpoints/multi30k-en-de` once replaced the bundled
    model (`average` did it without a word, its model card and probes gone)."""
    if not out.exists():
        return
    if not force:
        raise CheckpointError(f"{out} already exists; choose another --out or pass --force to replace it")
    if not out.is_dir():
        raise CheckpointError(f"{out} is a file; --force replaces a directory only")


def user_path(path: str | os.PathLike[str]) -> Path:
    """`path` with a leading `~` or `~user` expanded as a shell expands it; `~name` of no such user
    stays as written, to be reported as a path that does not exist (`Path.expanduser` raises a
    RuntimeError there: `translate --checkpoint '~nouser/x'` was a traceback)."""
    return Path(os.path.expanduser(path))


def save_checkpoint(
    directory: str | os.PathLike,
    model: Transformer,
    spm_model: str | os.PathLike | Mapping[str, str | os.PathLike],
    trainer_tensors: dict[str, torch.Tensor] | None = None,
    trainer_json: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
    card: str | None = None,
) -> Path:
    """Write a checkpoint atomically; `meta` (task, data, ...) goes into config.json's "meta".

    `spm_model` is the shared sentencepiece model (stored as spm.model), or {file name: path} of
    the tokenizer files a model imported from elsewhere brings (Marian's source.spm, ...), whose
    digests the config records; `card`, a model card written beside them as README.md."""
    directory = Path(directory)
    _check_replaceable(directory, training=trainer_tensors is not None)
    tmp = assembly_directory(directory)
    try:
        weights = {k: v.detach().to(dtype).contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "attnlab-model"})
        tokenizer_files = spm_model if isinstance(spm_model, Mapping) else {"spm.model": spm_model}
        for name, path in tokenizer_files.items():
            shutil.copyfile(path, tmp / name)
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")
        config = model.config.to_dict()
        config.pop("paper", None)
        meta = {**(meta or {}), "tokenizer_sha256": {name: sha256_of(tmp / name) for name in tokenizer_files}}
        (tmp / "config.json").write_text(json.dumps({"model": config, "meta": meta}, indent=2))
        if trainer_tensors is not None:
            state = {k: v.detach().contiguous().cpu() for k, v in trainer_tensors.items()}
            save_file(state, str(tmp / "trainer.safetensors"), metadata={"format": "attnlab-trainer"})
            (tmp / "trainer.json").write_text(json.dumps(trainer_json or {}, indent=1))
        files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_of(p)} for p in sorted(tmp.iterdir())}
        (tmp / MANIFEST).write_text(json.dumps({"format": "attnlab-checkpoint", "version": VERSION, "files": files}))
        open_modes(tmp)
        for path in tmp.iterdir():  # make the bytes durable before the rename publishes them
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        publish(tmp, directory)
    except (OSError, SafetensorError) as error:  # ENOSPC, EDQUOT, EIO (safetensors' own error for its files)
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"could not write {directory} ({why_not_written(error)}); nothing was written, and nothing already there was changed"
        ) from error
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _check_replaceable(directory: Path, training: bool) -> None:
    """A new checkpoint replaces only an older attnlab checkpoint or an empty directory. It once
    replaced whatever was there: `attnlab average RUN --out RUN` deleted the run it averaged
    (its checkpoints, its log), and any other directory named by mistake would have gone too.
    Only a training checkpoint replaces a training checkpoint: an average written over another
    run's `checkpoints/step_N` took its optimizer state, and that run could no longer resume.
    Nor does it replace files its manifest does not list beside the probes `average` copies in:
    `attnlab average ... --out checkpoints/multi30k-en-de --force` deleted the bundled model's card."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is a file; refusing to replace it with a checkpoint")
    if not any(directory.iterdir()):
        return
    try:
        manifest = json_loads((directory / MANIFEST).read_text())
        ours = manifest.get("format") == "attnlab-checkpoint" and isinstance(manifest.get("files"), dict)
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise CheckpointError(
            f"{directory} exists and is not an attnlab checkpoint; refusing to replace it (name a new directory)"
        )
    if added := sorted(p.name for p in directory.iterdir() if p.name not in (*manifest["files"], MANIFEST, "probes")):
        raise CheckpointError(
            f"{directory} holds {', '.join(map(repr, added[:3]))}, which its manifest does not list (a model card added since?); "
            "refusing to replace it (name a new directory)"
        )
    card, written = directory / "README.md", manifest["files"].get("README.md")
    if isinstance(written, dict) and card.is_file() and sha256_of(card) != written.get("sha256"):
        raise CheckpointError(  # (an imported model's card, edited since: --force wrote over it without a word)
            f"{card} was edited since the checkpoint was written; refusing to replace it (name a new directory)"
        )
    if not training and (directory / "trainer.json").exists():
        raise CheckpointError(
            f"{directory} is a training run's checkpoint (its run resumes from it); refusing to replace it "
            "(name a new directory)"
        )


def update_meta(directory: str | os.PathLike, **changes: Any) -> None:
    """Set entries of a checkpoint's meta (e.g. the best alignment reading measured after
    training) without touching its weights or the files beside it (a model card, probes). The
    checkpoint is assembled again beside it, its other files linked (copied where links cannot
    be), and renamed into place as every checkpoint is written (`publish`): config.json and the
    manifest renamed over the old one after the other left a checkpoint that no longer loaded
    when killed between the two, and showed "damaged" to a reader opening it in between."""
    directory = Path(directory)
    manifest = verify(directory)
    data = json_loads((directory / "config.json").read_text())
    data["meta"] = {**data.get("meta", {}), **changes}
    tmp = assembly_directory(directory)
    try:
        shutil.copytree(directory, tmp, copy_function=link_or_copy, dirs_exist_ok=True)
        for name in ("config.json", MANIFEST):  # (links: written in place they would change the old files)
            (tmp / name).unlink()
        (tmp / "config.json").write_text(json.dumps(data, indent=2))
        manifest["files"]["config.json"] = {
            "bytes": (tmp / "config.json").stat().st_size,
            "sha256": sha256_of(tmp / "config.json"),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest))
        publish(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def unreadable(path: Path, error: Exception) -> CheckpointError:
    """Why safetensors could not read `path`, in its own words: "not a safetensors file
    (SafetensorError)" was all a valid checkpoint at a path that is not UTF-8 was told."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    what = "cannot be opened" if "not valid UTF-8" in said else "not a safetensors file"
    return CheckpointError(f"{path}: {what} ({said}); refusing to load it")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise unreadable(path, error) from None


def read_config(directory: str | os.PathLike) -> tuple[ModelConfig, dict[str, Any]]:
    path = Path(directory) / "config.json"
    try:
        data = json_loads(path.read_text())
        if not isinstance(data, dict) or "model" not in data:  # (a KeyError read "not a usable config ('model')")
            raise ValueError('it has no "model" section')
        if not isinstance(data["model"], dict):  # "base" was read as the unknown keys a, b, e, s
            raise ValueError(f'its "model" section is not a mapping of settings, got {data["model"]!r:.40}')
        if not isinstance(meta := data.get("meta", {}), dict):  # (its tokenizer's digest is read from it)
            raise ValueError(f"its meta is not a mapping, got {meta!r:.40}")
        return ModelConfig.from_dict(data["model"]), meta
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as error:
        raise CheckpointError(f"{path}: not a usable attnlab config ({error})") from None


def load_model(
    directory: str | os.PathLike, device: str = "cpu", deep: bool = True, dtype: torch.dtype = torch.float32
) -> tuple[Transformer, dict[str, Any]]:
    """(model in eval mode, in `dtype`, meta) from a checkpoint directory."""
    directory = Path(directory)
    manifest = verify(directory, deep=deep)
    config, meta = read_config(directory)
    check_tokenizer(directory, manifest, meta)
    # Compare the config with the weights' shapes (read from the file's header) before building the
    # model: an edited config must not make attnlab allocate a model of any size it names.
    shapes = tensor_shapes(directory / "model.safetensors")
    layers = {int(m.group(1)) for name in shapes if (m := _LAYER.match(name))}
    mismatch = CheckpointError(f"{directory}: weights do not match the config (foreign or edited checkpoint)")
    if len(layers) != config.n_layers:
        raise mismatch
    with torch.device("meta"):  # shapes only, nothing allocated
        expected = {k: tuple(v.shape) for k, v in Transformer(config).state_dict().items()}
    if expected != shapes:
        raise mismatch
    weights = read_safetensors(directory / "model.safetensors")
    check_weights(weights, directory / "model.safetensors")
    model = Transformer(config)
    model.load_state_dict({k: v.float() for k, v in weights.items()})
    return model.to(device, dtype).eval(), meta


def check_weights(weights: Mapping[str, torch.Tensor], path: Path) -> None:
    """Refuse weights no trained model has, naming the first tensor: integers or booleans, which
    `.float()` turned into a model that translated every sentence as a row of one piece, and NaN
    or infinities, with which every hypothesis died and `translate` raised an IndexError."""
    for name, tensor in weights.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{path}: {name} holds {tensor.dtype} values, not weights (a foreign or edited file)")
        if not torch.isfinite(tensor).all():
            raise CheckpointError(f"{path}: {name} holds NaN or infinite weights (a diverged or damaged model)")


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """{name: shape} from a safetensors file's header, without reading the tensors."""
    try:
        with safe_open(str(path), "pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as error:
        raise unreadable(path, error) from None


def load_trainer_state(directory: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    directory = Path(directory)
    tensors = read_safetensors(directory / "trainer.safetensors")
    try:
        state = json_loads((directory / "trainer.json").read_text())
    except (OSError, ValueError):
        raise CheckpointError(f"{directory}: trainer.json is missing or not JSON") from None
    return tensors, state


def step_dirs(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of the run's checkpoint directories, oldest first (validity not checked)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def weights_digest(directory: str | os.PathLike | None) -> str | None:
    """The sha256 of a checkpoint's model.safetensors as its manifest records it: which weights
    a profile was made with, whatever the directory is called (every run has a step_1000) and
    whatever dtype they were opened in. None for what has no manifest (a Marian directory)."""
    try:
        return str(verify(directory, deep=False)["files"]["model.safetensors"]["sha256"]) if directory else None
    except (CheckpointError, KeyError, TypeError):
        return None


def latest_valid(run_dir: str | os.PathLike) -> Path | None:
    """The newest checkpoint that verifies; damaged ones are skipped with a warning, and the one
    read after them is named (`evaluate RUN` printed the BLEU of an older step without a word)."""
    skipped = False
    for _, path in reversed(step_dirs(run_dir)):
        try:
            verify(path)
        except CheckpointError as error:
            warn(f"skipping damaged checkpoint: {error}")
            skipped = True
            continue
        if skipped:
            warn(f"reading {path.name}, the newest checkpoint of {run_dir} that verifies")
        return path
    return None


def prune(run_dir: str | os.PathLike, keep: int) -> None:
    """Keep the newest `keep` checkpoints (0 keeps all)."""
    for _, path in step_dirs(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
