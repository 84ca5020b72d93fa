"""A checkpoint's manifest (`manifest.json`, written last): the size and sha256 of every file,
checked whenever a checkpoint is opened, so that a truncated, damaged or replaced file is one line.
The model's config also records the sha256 of the tokenizer files it was saved with
(`meta.tokenizer_sha256`): a tokenizer of another model of the same vocabulary size, swapped in and
listed in a rewritten manifest, translated every sentence into other pieces without a word (an
English→Spanish model with the English→Chinese spm.model wrote "ap蚁ter为了…")."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnlab.errors import CheckpointError, json_loads

MANIFEST = "manifest.json"
VERSION = 1  # of the manifest's layout (`checkpoint.save_checkpoint` writes it)
REQUIRED = ("model.safetensors", "config.json")  # a manifest that lists neither checks nothing


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_directory(directory: Path) -> None:
    """Refuse, in one line, a model path that is no directory: one that does not exist (a typo)
    is said so, where it was "not a directory" as a file is."""
    if not directory.is_dir():
        why = "not a directory" if directory.exists() else "does not exist"
        why = "a symbolic link to nothing (its target is missing, or a loop)" if directory.is_symlink() else why
        raise CheckpointError(f"{directory}: {why}")


def verify(directory: str | os.PathLike, deep: bool = True) -> dict[str, Any]:
    """The manifest, after checking every file's size (and sha256 when `deep`); a file or
    directory the user may not read is one line (a PermissionError traceback before)."""
    directory = Path(directory)
    try:
        return _verify(directory, deep)
    except OSError as error:
        name = Path(error.filename).name if error.filename else directory.name
        raise CheckpointError(f"{directory}: cannot read {name} ({error.strerror or error})") from None


def _verify(directory: Path, deep: bool) -> dict[str, Any]:
    check_directory(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        hint = ""
        if (directory / "checkpoints").is_dir():
            hint = " (a run directory? pass RUN_DIR/checkpoints/step_N or an averaged checkpoint)"
        elif (directory / "source.spm").is_file() or (directory / "vocab.json").is_file():  # Marian's files
            hint = " nor a Hugging Face Marian model (no config.json)"
        raise CheckpointError(f"{directory}: not an attnlab checkpoint (no {MANIFEST}){hint}")
    try:
        manifest = json_loads(manifest_path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{directory}: damaged {MANIFEST}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "attnlab-checkpoint":
        raise CheckpointError(f"{directory}: {MANIFEST} is not an attnlab checkpoint manifest")
    if manifest.get("version", VERSION) != VERSION:  # (a later layout was read as this one)
        raise CheckpointError(
            f"{directory}: {MANIFEST} version {manifest.get('version')!r} is not supported (this attnlab reads {VERSION})"
        )
    files = manifest.get("files")
    entry = {"bytes": int, "sha256": str}
    if not isinstance(files, dict) or not all(
        isinstance(info, dict) and all(isinstance(info.get(k), kind) for k, kind in entry.items())
        for info in files.values()
    ):
        raise CheckpointError(f"{directory}: damaged {MANIFEST} (its file list has another shape)")
    if outside := [
        name for name in files if Path(name).name != name or name in ("", ".", "..") or not name.isprintable()
    ]:
        # a checkpoint's files lie in it: "../../etc/shadow" told its size, and a guessed digest was confirmed
        raise CheckpointError(f"{directory}: its {MANIFEST} lists {outside[0]!r}, not a file of the checkpoint")
    if unlisted := [name for name in REQUIRED if name not in files]:
        raise CheckpointError(f"{directory}: its {MANIFEST} does not list {' or '.join(unlisted)} (damaged or edited)")
    for name, info in files.items():
        path = directory / name
        if not path.is_file():  # (a FIFO, a directory or a symlink loop was "missing" too)
            there = path.exists() or path.is_symlink()
            raise CheckpointError(f"{directory}: {name} is {'not a regular file' if there else 'missing'}")
        size = path.stat().st_size
        if size < info["bytes"]:
            raise CheckpointError(f"{directory}: {name} is truncated or replaced ({size:,} of {info['bytes']:,} bytes)")
        if size != info["bytes"]:  # not the file the manifest lists: replaced or edited
            raise CheckpointError(
                f"{directory}: {name} is not the file this checkpoint was written with "
                f"({size:,} bytes, its manifest says {info['bytes']:,}): replaced or modified"
            )
        extent = safetensors_extent(path) if name.endswith(".safetensors") else None
        if extent is not None and size != extent:  # (before hashing: a sparse file of terabytes took hours)
            raise CheckpointError(
                f"{directory}: {name} has {size:,} bytes where its header accounts for {extent:,} (not a file attnlab wrote)"
            )
    for name, info in files.items():  # the slow check last, once every cheap one has passed
        if deep and sha256_of(directory / name) != info["sha256"]:
            raise CheckpointError(f"{directory}: {name} does not match its checksum (damaged or modified)")
    return manifest


def safetensors_extent(path: Path) -> int | None:
    """The bytes a safetensors file's header says the file has (8, the header, the tensors' data up
    to the last one's end), or None where the header cannot be read: safetensors refuses it then."""
    try:
        with path.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length > 100_000_000:  # (safetensors' own bound on a header)
                return None
            header = json_loads(handle.read(length))
        return 8 + length + max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, UnicodeDecodeError):
        return None


def check_tokenizer(directory: Path, manifest: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    """Refuse tokenizer files that are not those `meta.tokenizer_sha256` says the model was saved
    with (checkpoints saved before 2026-12-07 record none; `update_meta` gave the bundled ones theirs)."""
    recorded = meta.get("tokenizer_sha256")
    if recorded is None:
        return
    if not isinstance(recorded, dict) or not recorded or not all(isinstance(v, str) for v in recorded.values()):
        raise CheckpointError(f"{directory}/config.json: meta.tokenizer_sha256 is not a mapping of files to digests")
    for name, digest in recorded.items():
        listed = manifest["files"].get(name)
        if listed is None:
            raise CheckpointError(f"{directory}: its manifest does not list {name}, the model's tokenizer")
        if listed["sha256"] != digest:
            raise CheckpointError(
                f"{directory}: {name} is not the tokenizer this model was saved with (a tokenizer of another model?)"
            )
