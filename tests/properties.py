"""Shared settings for the property-based tests (hypothesis): a fixed seed, a bounded number of
examples that appears in each test's id (`test_x[100-examples]`), and a guard that turns a hang
into a failure.

    @examples(100)
    def test_something(examples: int) -> None:
        def holds(case) -> None: ...
        prove(holds, examples, case=cases())

The property runs inside the test body (not as the test itself), so function-scoped fixtures
such as `tmp_path` can be used, and the test fails if hypothesis ran fewer examples than it says.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS: dict[str, Any] = {
    "derandomize": True,  # the same examples on every run and every machine: no flaky CI
    "database": None,  # nothing written to .hypothesis/, nothing replayed from an earlier run
    "deadline": None,  # a shared 2-core machine is noisy; hangs are caught by `time_limit` instead
    "print_blob": False,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def examples(count: int) -> pytest.MarkDecorator:
    """Parametrize a test with its example count, so that the count is in the test's id."""
    return pytest.mark.parametrize("examples", [count], ids=[f"{count}-examples"])


class Hang(Exception):
    """An example ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail (raise `Hang`) if the block runs longer than `seconds` (SIGALRM: main thread, POSIX)."""

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def prove(holds: Callable[..., None], count: int, limit_s: float = 30.0, **strategies: st.SearchStrategy) -> int:
    """Check `holds(**drawn)` on `count` derandomized examples, each within `limit_s` seconds;
    returns how many ran (at least `count`, or the test fails)."""
    ran = 0

    @settings(max_examples=count, **SETTINGS)
    @given(**strategies)
    def check(**drawn: Any) -> None:
        nonlocal ran
        ran += 1
        with time_limit(limit_s):
            holds(**drawn)

    check()
    assert ran >= count, f"hypothesis ran {ran} examples, fewer than the {count} this test claims"
    return ran


def one_line(message: str) -> bool:
    """A user-facing error message: non-empty, a single line."""
    return bool(message.strip()) and "\n" not in message and "\r" not in message
