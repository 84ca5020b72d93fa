"""The files and streams of the decoding commands (`translate`, `parse`, `record`, `align`,
`evaluate`, `heads profile`): inputs read from a file or stdin, outputs checked before any work
and written so that a full disk or a closed pipe is one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from attnlab.data.corpora import decode_lines, read_text, read_whole
from attnlab.errors import AttnlabError


def read_input(source: str | None, keep_invalid: bool = False) -> list[str]:
    """The lines of a file, or of stdin for "-" or None (`decode_lines`: cut at "\\n" only, a line
    that is not text refused as FILE:LINE or stdin:LINE, or with `keep_invalid` kept for
    `invalid_lines` to name; a file or stream that is binary from its start, refused whole by
    `read_whole`); every command reads its inputs here, so that each takes "-"
    (`evaluate --src -` and `heads profile --src -` once failed with "cannot read -: No such file")."""
    if source not in (None, "-"):
        return read_text(source, keep_invalid)
    if sys.stdin is None or sys.stdin.closed:  # None: Python started with it closed (`<&-`); .buffer then raised
        raise AttnlabError("stdin (-) is closed, so there is nothing to read: name an input file instead")
    if terminal_stdin():  # (`attnlab align` with no --input waited on the terminal without a word)
        print("attnlab: reading the lines from the terminal: end them with Ctrl-D", file=sys.stderr)
    # the bytes: Python's own stdin decoding turns a bad byte into a surrogate (`< /dev/zero` grew forever)
    return decode_lines(read_whole(sys.stdin.buffer, "stdin"), "stdin", keep_invalid)


def terminal_stdin() -> bool:
    """Whether stdin is a terminal someone types at, rather than a file or a pipe."""
    return sys.stdin is not None and not sys.stdin.closed and sys.stdin.isatty()


def one_stdin(inputs: dict[str, str | None]) -> None:
    """Refuse two of `inputs` ({flag: path}) reading stdin: the second read nothing, and was
    reported as a file of no lines."""
    dashes = [flag for flag, path in inputs.items() if path == "-"]
    if len(dashes) > 1:
        raise AttnlabError(f"{dashes[0]} and {dashes[1]} both read stdin (-), which can be read once: name a file")


MODEL_FILES = ("manifest.json", "model.safetensors", "pytorch_model.bin")  # attnlab's, Hugging Face's


def model_directory(path: Path) -> Path | None:
    """The model directory (one holding a `MODEL_FILES` file) that `path` is or lies inside, if any."""
    path = path.absolute()
    return next((d for d in (path, *path.parents) if any((d / f).is_file() for f in MODEL_FILES)), None)


def check_out(
    path: str | os.PathLike[str], flag: str = "--out", inputs: dict[str, str | os.PathLike[str] | None] | None = None
) -> Path:
    """`path` as a file this command can write (missing directories are made when it is
    written), checked before the decoding that fills it: a missing or read-only directory, or
    a directory given as the file, used to fail only after all the work. `inputs` ({flag: path},
    None or "-" for none) are the files the command reads: `evaluate --src s.en --out s.en`
    replaced the sources with the outputs and exited 0, so an --out that is one of them (by
    name, through a link, or a hard link) is refused."""
    path = Path(path)
    for name, source in (inputs or {}).items():
        if source is not None and str(source) != "-" and _same_file(path, Path(source)):
            raise AttnlabError(f"{flag} {path} is the {name} file; writing there would replace it (name another file)")
    # `evaluate --out CKPT/model.safetensors` wrote BLEU lines over the weights and exited 0.
    model_dir = model_directory(path)
    if model_dir is not None:
        raise AttnlabError(f"{flag} {path} is inside the model directory {model_dir}; name a file elsewhere")
    if path.is_dir():
        raise AttnlabError(f"{flag} {path} is a directory; name the file to write")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise AttnlabError(f"{flag} {path}: {folder} is a file, not a directory")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise AttnlabError(f"{flag} {path}: no permission to write there")
    return path


def _same_file(one: Path, other: Path) -> bool:
    """Whether two paths name one file: the same inode where both exist (a symlink or a hard
    link), else the same path once links and `..` are resolved."""
    with contextlib.suppress(OSError):
        if one.exists() and other.exists():
            return os.path.samefile(one, other)
    return one.resolve() == other.resolve()


def write_out(path: Path, text: str) -> None:
    """Write a `check_out` path, making its missing directories; a full disk is one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise AttnlabError(f"cannot write {path}: {error.strerror or error}") from None


def write_stdout(text: str) -> None:
    """Write and flush the answer now, before the summary line on stderr: a full disk or a closed
    pipe (`| head`) raises here, and the command table (`attnlab.cli`) says the one and keeps
    quiet about the other."""
    sys.stdout.write(text)
    sys.stdout.flush()
