"""A time limit on decoding, checked before each step: a served explorer decodes one request
at a time, so one huge input must not hold up every other session."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from attnlab.errors import ConfigError, TimeLimitError

# (monotonic time at which decoding stops, the limit in seconds), per thread and asyncio task
DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("attnlab_decode_deadline", default=None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Decoding in this block (in this thread or task only) stops with a one-line
    `TimeLimitError` once it has run for `seconds` (None or 0: no limit). A served explorer
    decodes one request at a time, so one 1,000-piece input at beam 32 (minutes) would hold up
    every other session; the limit is checked before each decoding step."""
    if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"the time limit must be a number of seconds ≥ 0 (0: none), got {seconds!r}")
    token = DEADLINE.set((time.monotonic() + seconds, seconds) if seconds else None)
    try:
        yield
    finally:
        DEADLINE.reset(token)


def check_time(what: str = "decoding", hint: str = "try a shorter text or a smaller beam") -> None:
    """Raise `TimeLimitError` if the `time_limit` around this call has run out: `what` stopped,
    and the `hint` of what would take less time. Decoding checks before each step; any other
    long computation a server runs for a visitor (gradient saliency) passes its own words."""
    deadline = DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise TimeLimitError(f"{what} stopped after {deadline[1]:g} s, its time limit: {hint}")
