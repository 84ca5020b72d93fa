"""Whether a file is text at all, judged by its first bytes before any line of it is read, and
what makes one line of it no text.

Every reader of text calls `refuse_binary` on a file's (or stream's) first block: `translate -i
train.en.gz` or `-i model.safetensors` was read as thousands of lines, each named on stderr as
"invalid UTF-8" and the fragments that decoded translated; a file of NULs was "line 1 is empty";
a UTF-16 training file beside its UTF-8 partner was "has 301 lines but ... has 300". A file that
is binary from its start is refused whole, in one line; a text file with a bad line here and
there keeps its per-line policy (`line_fault`).
"""

from __future__ import annotations

from attnlab.errors import DataError

HEAD = 8000  # the bytes judged, as git judges a file binary (a NUL in its first 8000)
GZIP_MAGIC = b"\x1f\x8b"  # no UTF-8 text begins so: 0x8b is a continuation byte
# UTF-16's byte-order marks, little- and big-endian: what Windows Notepad's "Unicode" files begin
# with. Read as UTF-8 such a file was "invalid UTF-8 (invalid start byte at byte 0)" at line 1.
UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
UTF16_SAID = "UTF-16 text (it begins with UTF-16's byte-order mark, as Notepad's \"Unicode\"); save it as UTF-8"


def refuse_binary(head: bytes, name: str) -> None:
    """Refuse the file or stream `name`, whose first bytes are `head`, in one line when it is no
    UTF-8 text: UTF-16 (its byte-order mark), gzip (its magic), or anything holding a NUL in its
    first `HEAD` bytes (a checkpoint, an archive, UTF-16 without a mark; no text holds one)."""
    if head[:2] in UTF16_MARKS:
        raise DataError(f"{name}: {UTF16_SAID}")
    if head[:2] == GZIP_MAGIC:
        raise DataError(
            f"{name}: gzip-compressed, not text; unpack it first (gunzip it, or pipe zcat's output to stdin)"
        )
    if (at := head.find(b"\0", 0, HEAD)) >= 0:
        raise DataError(
            f"{name}: not text, a NUL byte at byte {at} (a binary file, or UTF-16 without its byte-order mark); "
            "give a UTF-8 text file"
        )


def line_fault(raw: bytes) -> str | None:
    """What makes one line (its bytes) no text, or None: invalid UTF-8, or a NUL byte, which no
    text holds (past a file's first block it fails that line alone, as invalid UTF-8 does; read
    as a space, "A\\x00dog runs ." was translated without a word)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return utf8_said(error)
    return f"a NUL byte at byte {raw.index(0)}, which no text holds" if b"\0" in raw else None


def utf8_said(error: UnicodeDecodeError) -> str:
    """A line's invalid UTF-8 in the words every reader of text uses: what is wrong, and where in the line."""
    return f"invalid UTF-8 ({error.reason} at byte {error.start})"
