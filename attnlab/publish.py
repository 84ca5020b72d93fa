"""Writing a directory in one step: it is assembled in a temporary sibling (`.NAME.tmp-XXXX`,
with the modes `mkdir` and `open` would give) and renamed into place, swapped with the one it
replaces where Linux can, so that a reader or a kill never meets it half written. Checkpoints,
traces, profiles and prepared data are written this way."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from attnlab.errors import CheckpointError


def umask() -> int:
    """The process's umask: what `mkdir` and `open` take from the modes they give."""
    mask = os.umask(0o022)  # (reading the umask means setting it)
    os.umask(mask)
    return mask


def temporary_sibling(target: Path, directory: bool = True) -> Path:
    """An empty directory (or file) beside `target` to assemble it in before the rename, with
    the mode `mkdir` (or `open`) would give: mkdtemp's 0700 and mkstemp's 0600 would survive the
    rename, leaving checkpoints and traces that others on the machine, or an explorer served as
    another user, cannot read."""
    if directory:  # .step_N.tmp-XXXX: what a resumed run sweeps up (`train.resume.tidy`)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    else:
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(handle)
        tmp = Path(name)
    tmp.chmod((0o777 if directory else 0o666) & ~umask())
    return tmp


def assembly_directory(target: Path) -> Path:
    """`temporary_sibling(target)`, its parents made first; what stops that (a parent that is a
    file, one not writable: nothing to clean up yet) is one line naming `target` and why, never
    the temporary directory's name nobody typed (/proc/.x.tmp-2b43ero9)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return temporary_sibling(target)
    except OSError as error:  # (a parent that is a file: "File exists", where /dev/null/x was asked for)
        file = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
        why = f"{file} is not a directory" if file else error.strerror or error
        raise CheckpointError(f"cannot write {target} ({why})") from None


def open_modes(directory: Path) -> None:
    """Give the files in `directory` the mode `open` would: safetensors writes 0600."""
    mode = 0o666 & ~umask()
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(mode)


def publish(tmp: Path, directory: Path) -> None:
    """Rename the assembled `tmp` to `directory`. An older one there is swapped with it in one
    step where the system can (`exchanged`), then removed: at every moment `directory` is the old
    checkpoint or the new one, whole, even under a kill. Elsewhere it is renamed aside first (and
    back, if the second rename fails) and removed only after: removing it first (a whole
    checkpoint's files) left a window in which a failure or a kill lost both."""
    if directory.is_symlink():  # (replacing the link would leave its target as it was, and a stray link)
        raise OSError(errno.EEXIST, f"{directory.name} is a symbolic link; name the directory it points to")
    if not directory.exists():
        os.replace(tmp, directory)
        return
    if exchanged(tmp, directory):
        shutil.rmtree(tmp, ignore_errors=True)  # (the old checkpoint, now)
        return
    aside = temporary_sibling(directory)  # (swept up as a temporary)
    try:  # `import ... --out .` cannot rename the working directory: the empty aside stayed behind
        os.replace(directory, aside)
    except BaseException:
        shutil.rmtree(aside, ignore_errors=True)
        raise
    try:
        os.replace(tmp, directory)
    except BaseException:
        os.replace(aside, directory)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def exchanged(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux's renameat2 with RENAME_EXCHANGE), or False where the
    system or file system has no such call; any other failure is the OSError it is."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, rename_exchange = -100, 2  # <fcntl.h>, <linux/fs.h>
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(error, os.strerror(error), str(second))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


def why_not_written(error: BaseException) -> str:
    """The reason of a failed write in a few words: an OSError's strerror ("No space left on
    device"); safetensors wraps the OS's error in its own ("Error while serializing: I/O error: No
    space left on device (os error 28)"), which is read for the same words."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    found = re.search(r"I/O error: (.+?) \(os error \d+\)", str(error))
    return found.group(1) if found else str(error)


def link_or_copy(source: str, target: str) -> None:
    """`shutil.copytree`'s copy as a hard link: a checkpoint assembled again shares its unchanged
    files (the weights) with the old one instead of writing them twice."""
    try:
        os.link(source, target)
    except OSError:  # (a file system without hard links)
        shutil.copy2(source, target)
