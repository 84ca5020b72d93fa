"""What the browser tests share: Debian's Chromium, started the way this machine needs.

Playwright's own browser download does not work offline, so the tests drive /usr/bin/chromium
(`make browser` installs it) with the flags that keep it off the network."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_chromium() -> None:
    """Skip the calling test module when Playwright or Chromium is missing."""
    pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make browser)", allow_module_level=True)


@contextmanager
def launched_chromium() -> Iterator[object]:
    """Debian's Chromium under Playwright, closed on exit (skips the module when either is missing)."""
    require_chromium()
    from playwright.sync_api import sync_playwright  # optional: the browser tests' dependency

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()
