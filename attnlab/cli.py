"""`attnlab COMMAND ...`: the command table. Each command lives in the room of its concept, as
`cli(argv)` (or `cli_COMMAND(argv)` where one module holds several); the module is imported only
when its command runs, so `attnlab --help` starts fast.

This file only dispatches and turns `AttnlabError` into a one-line message and exit status 2,
so that a user never sees a traceback for bad input (nor argparse's usage block above the line:
every command's parser is an `attnlab.errors.ArgumentParser`). Every line names the command as
typed, a nested one whole (`attnlab heads patch: error: ...`, `_run`). Every command's parser is built with `allow_abbrev=False`: a shortened or
misspelt flag is refused, never taken for the flag it begins (argparse's default, under which
`--vocab 1000` quietly set --vocab-size).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import signal
import sys
import threading
import warnings
from types import FrameType
from typing import Any, TextIO

from attnlab.errors import AttnlabError

COMMANDS: dict[str, tuple[str, str]] = {
    "presets": ("attnlab.model.presets", "list the model presets (Table 3) with parameter counts"),
    "flops": ("attnlab.model.flops", "model FLOPs per token and the paper's Table 2 cost estimate"),
    "data": ("attnlab.data.commands", "prepare or download corpora (data prepare|download CORPUS)"),
    "train": ("attnlab.train.commands", "train a model (the paper's regime; resumes a run directory)"),
    "average": ("attnlab.train.average", "average the last K checkpoints of a run"),
    "translate": ("attnlab.decode.commands", "translate lines from a file or stdin"),
    "parse": ("attnlab.decode.commands", "parse sentences into Penn-Treebank trees"),
    "record": ("attnlab.decode.commands", "record attention traces of sentences to disk"),
    "align": ("attnlab.decode.align_command", "word alignments (Pharaoh i-j) from teacher-forced cross-attention"),
    "lens": ("attnlab.decode.lens", "where each output piece is decided (logit lens), who wrote it (--attribute)"),
    "evaluate": ("attnlab.decode.evaluate", "sacreBLEU/chrF, bracket F1 for parsing, or AER for alignment"),
    "heads": ("attnlab.decode.heads", "head statistics, importance, patching (heads profile|query|importance|patch)"),
    "explore": ("attnlab.app.serve", "open the explorer web app"),
    "import": ("attnlab.decode.interop", "convert a Hugging Face Marian / OPUS-MT directory to a checkpoint"),
    "export": ("attnlab.decode.interop", "write a checkpoint as a CTranslate2 model (pip install attnlab[serve])"),
}


def usage() -> str:
    lines = ["usage: attnlab COMMAND [options]   (attnlab COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<10} {doc}" for name, (_, doc) in COMMANDS.items()]
    lines += ["", 'e.g.  echo "A dog runs in the park ." | attnlab translate --checkpoint checkpoints/multi30k-en-de']
    lines += ["", 'README.md ("Command line") shows every command at work; attnlab --version prints the version.']
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "--version":  # (it was "unknown command '--version'")
        print(f"attnlab {importlib.import_module('attnlab').__version__}")  # by name, as the commands are
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"attnlab: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    with warnings.catch_warnings():  # a warning is a line for the user too, not a source location
        return _run(command, rest)


class Terminated(BaseException):
    """SIGTERM, raised where the command is, as Ctrl-C raises KeyboardInterrupt: its cleanup runs
    and it says one line. By the default action a scheduler's or `timeout`'s SIGTERM ended a
    command without a word (`train` in its start-up, before its loop defers the signal to a
    checkpoint, left an empty --out and no line in the job's log)."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def _run(command: str, rest: list[str]) -> int:
    """Run `command`; its errors, warnings and interruption are one line naming it, a nested one
    whole (`attnlab heads patch: error: ...`, as its module's `SUBCOMMANDS` list them)."""
    stdout = sys.stdout = _Stdout(sys.stdout)
    warnings.showwarning = lambda message, *_: print(f"attnlab {command}: warning: {message}", file=sys.stderr)
    main_thread = threading.current_thread() is threading.main_thread()  # (only there can a handler be set)
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        module = importlib.import_module(COMMANDS[command][0])  # (Ctrl-C while torch loads was a traceback)
        if rest and rest[0] in getattr(module, "SUBCOMMANDS", ()):
            command = f"{command} {rest[0]}"  # (it said `attnlab heads:` where argparse said `attnlab heads patch:`)
        runner = getattr(module, "cli_" + command.split()[0], None) or module.cli
        code = int(runner(rest) or 0)
        sys.stdout.flush()  # here, not at exit: a full disk or a closed pipe is then one line
    except AttnlabError as error:
        print(f"attnlab {command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnlab {command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"attnlab {command}: stopped by SIGTERM", file=sys.stderr)
        return 128 + signal.SIGTERM  # what a shell reports for a process the signal ended
    except OSError as error:
        if error is not stdout.failed:
            if isinstance(error, PermissionError) and error.filename:  # the system's no, not a bug
                print(f"attnlab {command}: error: {error.filename}: {error.strerror}", file=sys.stderr)
                return 2
            raise
        with contextlib.suppress(OSError, ValueError):  # the unwritten rest goes nowhere, not to a second traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        if error.errno == errno.EPIPE:  # the reader had enough (`| head`): quiet, as a Unix tool killed by SIGPIPE
            return 128 + signal.SIGPIPE
        print(f"attnlab {command}: error: cannot write to stdout: {error.strerror or error}", file=sys.stderr)
        return 2
    finally:
        sys.stdout = stdout.stream
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


class _Stdout:
    """sys.stdout, remembering the error a write to it raised: a full disk is then one line,
    `attnlab presets | head` no line at all, and an OSError of any other file stays what it is."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.failed = stream, None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as error:
            self.failed = error
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as error:
            self.failed = error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


if __name__ == "__main__":
    sys.exit(main())
