"""The --out directory of `attnlab data prepare`: checked before any work, prepared in a
temporary sibling, and published by one rename at the end.

It was written in place: Ctrl-C, a --vocab-size refused by sentencepiece, or any failure half-way
left a new directory holding spm.model alone, or an earlier preparation without its meta.json and
with its splits encoded by two vocabularies. Now --out is untouched until the new directory is
whole; an earlier preparation is renamed aside, the new one renamed in, and only then is the old
one deleted. What a user kept in it (notes, the inputs of this run) comes along into the new one.

attnlab.data may not import attnlab.model (docs/ARCHITECTURE.md), so the temporary sibling is
made by `attnlab.publish.temporary_sibling`, as a checkpoint's is: `.NAME.tmp-XXXX`, with
the mode `mkdir` would give.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnlab.data.corpora import SPLIT_NAMES, Split
from attnlab.errors import DataError, json_loads
from attnlab.publish import publish as rename_into_place
from attnlab.publish import temporary_sibling

EXTS = ("bin", "idx", "txt")  # files of one side of a prepared split
STALE_AFTER_S = 10.0  # a temporary no run holds, unchanged this long, was left by a killed run


def _split_files(name: str) -> list[str]:
    return [f"{name}.{side}.{ext}" for side in ("src", "tgt") for ext in EXTS]


def _outputs(splits: list[Split]) -> list[str]:
    """The name of every file `prepare` writes."""
    return ["meta.json", "spm.model", "spm.vocab", *(name for split in splits for name in _split_files(split.name))]


def _inputs(splits: list[Split]) -> list[Path]:
    return [path for split in splits for path in split.files or () if path.exists()]


def _any_same(path: Path, others: list[Path]) -> Path | None:
    """The first of `others` that is the file `path` (by identity: a link counts), if any."""
    return next((other for other in others if os.path.samefile(path, other)), None)


def read_meta(path: Path) -> dict:
    """A preparation's meta.json, checked for what reading its splits needs: a damaged, hand-edited
    or foreign one (not JSON, no "splits", a split without its pair count, an unknown dtype) was a
    JSONDecodeError, TypeError or KeyError traceback from `attnlab train --data`."""
    try:
        meta = json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # (a UnicodeDecodeError is a ValueError)
        raise DataError(f"{path}: cannot read it as JSON ({error}); prepare the data again") from None
    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, dict) or not all(
        isinstance(split, dict) and type(split.get("pairs")) is int and split["pairs"] >= 0 for split in splits.values()
    ):
        raise DataError(f"{path} has no pair count for each split; prepare the data again")
    if meta.get("dtype") not in ("uint16", "int32"):  # what `prepare` writes
        raise DataError(f"{path}: dtype {meta.get('dtype')!r} is not uint16 or int32; prepare the data again")
    spm = path.parent / "spm.model"  # another preparation's, copied in: a run paired its pieces with these ids
    if "spm_sha256" in meta and spm.is_file() and spm_digest(spm) != meta["spm_sha256"]:
        raise DataError(
            f"{spm} is not the vocabulary {path.parent}'s token ids were written with; prepare the data again"
        )
    return meta


def spm_digest(path: Path) -> str:
    """sha256 of a sentencepiece model, which `prepare` records in meta.json (`spm_sha256`)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _is_prepared(out: Path) -> bool:
    try:
        read_meta(out / "meta.json")
    except DataError:
        return False
    return True


def check_out(out: Path) -> None:
    """Refuse, before any work, an --out that publishing would destroy: a file, an attnlab
    checkpoint or training run (`--out CHECKPOINT` wrote over its spm.model and exited 0), or any
    other directory that is neither empty nor an earlier preparation (known by its meta.json)."""
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file; name a directory to write the prepared data into")
    try:
        if not out.is_dir() or not any(out.iterdir()):
            return
    except OSError as error:
        raise DataError(f"--out {out}: cannot read it ({error.strerror})") from None
    if (out / "manifest.json").exists():
        what = "an attnlab checkpoint"
    elif (out / "checkpoints").is_dir():
        what = "a training run's directory"
    elif not _is_prepared(out):
        what = "not a prepared data directory (it has no meta.json)"
    else:
        return
    raise DataError(
        f"--out {out} is {what}; refusing to replace it with prepared data "
        "(name a new or empty directory, or an earlier preparation)"
    )


def refuse_overwriting_inputs(out: Path, splits: list[Split]) -> None:
    """Preparing from a prepared directory's own `.txt` files into that directory opened them for
    writing before reading them: the corpus was truncated to nothing. Publishing would now replace
    them instead; still refused, by file identity (so a symbolic or hard link to an input counts)."""
    inputs = _inputs(splits)
    for name in _outputs(splits):
        if (out / name).exists() and (source := _any_same(out / name, inputs)):
            raise DataError(
                f"--out {out}: writing {name} would overwrite the input {source}; prepare into another directory"
            )


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A new directory beside `out` to prepare into. If the block raises (an error, Ctrl-C), it is
    removed, and so are the parents of `out` made for it: nothing is left of the run. What a
    killed run (SIGKILL, a power cut: no handler ran) left beside `out` is removed first
    (`_sweep`)."""
    target = Path(os.path.realpath(out))  # beside what a link names, and never inside `out` (`--out .`)
    made = [parent for parent in target.parents if not parent.exists()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _sweep(target)
        tmp = temporary_sibling(target)
        held = hold(tmp)
    except OSError as error:
        _remove_made(made)
        file = next((path for path in out.parents if path.exists() and not path.is_dir()), None)
        problem = f"{file} is a file, not a directory" if file else f"cannot create it ({error.strerror})"
        raise DataError(f"--out {out}: {problem}") from None
    try:
        yield tmp
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(made)
        if isinstance(error, OSError):  # a full disk was a traceback (its file named here, read or written)
            where = f" ({error.filename})" if error.filename else ""
            raise DataError(f"stopped: {error.strerror or error}{where}; --out {out} is as it was") from None
        raise
    finally:
        os.close(held)


def hold(directory: Path) -> int:
    """A descriptor of `directory` holding an exclusive lock on it while this process writes into
    it (a preparation's temporary, a training run's --out): the kernel lets go when the descriptor
    is closed or the process ends, however it ends, so a directory no one holds is a finished or
    killed run's. BlockingIOError while another process holds it."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def _sweep(target: Path) -> None:
    """Remove the temporaries of killed preparations of `target` (`.NAME.tmp-XXXX`, up to a whole
    preparation each): those no process holds (`hold`) and unchanged for STALE_AFTER_S (one just
    made by another run is not locked yet). Only while `target` exists: a run killed between
    `publish`'s two renames left the earlier preparation set aside as its only copy."""
    if not target.is_dir():
        return
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.tmp-*"):
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:  # gone meanwhile, or not ours to read
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a live run holds it
            if time.time() - tmp.stat().st_mtime > STALE_AFTER_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass
        finally:
            os.close(fd)


def _remove_made(made: list[Path]) -> None:
    for parent in made:  # nearest first; one holding anything else stays
        try:
            parent.rmdir()
        except OSError:
            return


def publish(tmp: Path, out: Path, splits: list[Split]) -> list[str]:
    """Make the whole preparation in `tmp` the directory `out` by one rename, bringing along what
    an earlier preparation there holds besides the files this one writes and the files of splits
    it lacks (encoded with the old spm.model), unless one is this run's input. Returns the names of
    the splits dropped. On any failure `out` is as it was."""
    target = Path(os.path.realpath(out))
    inputs, others = _inputs(splits), sorted(set(SPLIT_NAMES) - {split.name for split in splits})
    stale = {name: split for split in others for name in _split_files(split)}
    written = set(_outputs(splits))
    try:
        for path in tmp.iterdir():  # the bytes durable before the rename publishes them
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        dropped: list[str] = []
        for entry in sorted(target.iterdir()) if target.is_dir() else ():
            if entry.name in stale and entry.is_file() and not _any_same(entry, inputs):
                dropped.append(stale[entry.name])
            elif entry.name not in written:
                _carry(entry, tmp / entry.name)
        with interrupts_deferred():  # (Ctrl-C in the removal said "interrupted" with `out` replaced)
            rename_into_place(tmp, target)  # (the earlier one swapped out, or set aside, then deleted)
    except OSError as error:
        raise DataError(f"--out {out}: cannot write it ({error.strerror or error}); it is as it was") from None
    return list(dict.fromkeys(dropped))


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) ignored while the block runs: publishing is
    a few renames and the old directory's removal, and an interruption in the middle said
    "interrupted" (`out` as it was, by the promise) while the new preparation was already in place.
    The work being done, the command ends as done. Only the main thread can set a handler: a
    preparation run in another thread is not shielded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:  # (set inside: whatever interrupts the setting still restores it)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _carry(entry: Path, into: Path) -> None:
    """`entry` as `into`, by hard links: nothing is copied, and the earlier directory keeps its
    own until the rename (a copy where a link is refused: another user's file, a FAT disk)."""
    if entry.is_symlink():
        os.symlink(os.readlink(entry), into)
    elif entry.is_dir():
        shutil.copytree(entry, into, symlinks=True, copy_function=_link)
    else:
        _link(entry, into)


def _link(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
