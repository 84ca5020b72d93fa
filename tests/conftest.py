"""Shared fixtures: the repo's paths, the shared corpora, and small deterministic models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# One torch thread in the suite and in the processes it starts: the tests' small matrices gain
# little from a second thread, and on shared cores two OpenMP threads slow down 3-50× when one
# of them is descheduled (docs/BENCHMARKS.md). Set before any test starts a subprocess.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def shared_data() -> Path | None:
    for candidate in (os.environ.get("ATTNLAB_DATA"), ROOT.parent / "shared" / "data"):
        if candidate and Path(candidate, "multi30k").is_dir():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data()
    if path is None:
        pytest.skip("the shared corpora (../shared/data or $ATTNLAB_DATA) are not on this machine")
    return path


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session", autouse=True)
def _decoding_kernel() -> None:
    """Built before the first test (once per machine, ~30 s; `make setup` normally has): a test
    that decodes under a time limit must not spend it compiling."""
    from attnlab.model.kernels import extension

    extension()


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Debian's Chromium for a browser test module (skips the module when it is missing)."""
    from browser import launched_chromium  # lazy: only browser tests need Playwright

    with launched_chromium() as launched:
        yield launched
