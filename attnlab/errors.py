"""One family of errors whose message is a single line meant for the user.

The CLI, the explorer and the widgets catch `AttnlabError` and show its message instead of a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from typing import Any, NoReturn


class AttnlabError(Exception):
    """Base class: bad input, bad files, impossible configurations.

    The message is English (the library knows no reader's language). An error a reader meets
    often, as an empty box, may also carry a `key` and the `fields` that fill it, from which a
    screen in another language says the whole message in that language (`attnlab.app.i18n`)."""

    def __init__(self, *args: object, key: str | None = None, **fields: object) -> None:
        super().__init__(*args)
        self.key, self.fields = key, fields


class ConfigError(AttnlabError, ValueError):
    """A configuration that cannot describe a model or a run."""


class ModelInputError(AttnlabError, ValueError):
    """Input the model cannot take (wrong shape, ids outside the vocabulary, too long)."""


class TimeLimitError(ModelInputError):
    """Decoding ran past the time limit set for it (`attnlab.decode.deadline.time_limit`)."""


class RecordingError(AttnlabError):
    """A recording read as what it is not: several forward passes joined as one."""


class DataError(AttnlabError):
    """A corpus or prepared data set that is missing, mismatched or malformed."""


class CheckpointError(AttnlabError):
    """A checkpoint or trace file that is missing, truncated, foreign or unsafe."""


class UsageError(AttnlabError):
    """A command line argparse refused: a missing, unknown or ill-typed option."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a refused command line as one line (`attnlab X: error: ...`) instead of
    the usage block above argparse's own: the block pushed the one line that says what is wrong
    below half a screen of options. `--help` still prints the whole usage.

    A negative number written with an exponent (`--alpha -1e308`) or as Python's float() reads
    it (`-inf`, `-nan`) is a value, as `-1` and `-.5` are to argparse: it was taken for an
    option (`-inf` for `-i nf`), and the line said "--alpha: expected one argument" rather than
    what is wrong with the number."""

    NEGATIVE = re.compile(r"^-((\d+\.?\d*|\.\d+)(e[-+]?\d+)?|inf|infinity|nan)$", re.IGNORECASE)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE

    def _parse_optional(self, arg_string: str) -> object:
        # argparse tries an option's prefix (`-i` of `-inf`) before the number pattern
        if self.NEGATIVE.match(arg_string) and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} ({self.prog} --help lists the options)")


def warn(message: str) -> None:
    """A `UserWarning` attributed to the first line outside attnlab that led to it (as Python
    3.12's `skip_file_prefixes`): `attnlab.load` of a run whose newest checkpoint is damaged
    showed attnlab's own source line under its warning, not the caller's. The command line
    prints the message alone (`attnlab.cli`)."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "attnlab":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


def json_loads(text: str | bytes) -> Any:
    """`json.loads`, with a document nested past Python's recursion limit ("[" * 100000) a
    ValueError, as any other text that is not JSON: it was a RecursionError, which every reader's
    `except ValueError` let through as a traceback (one such config.json under the explorer's
    checkpoint root emptied the page for every visitor). Every file attnlab reads as JSON is read here."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
