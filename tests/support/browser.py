"""A real headless Chromium for tests and benchmarks: Debian's ``chromium`` driven by Playwright.

Never ``playwright install`` (it downloads a browser build): the system's
``/usr/bin/chromium`` (``apt-get install chromium``; ``.ci/run`` does it) is
launched through ``executable_path``, with a fresh profile each time and every
background service that could make a network request switched off.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

CHROMIUM = os.environ.get("DSCLEAN_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def unavailable() -> str | None:
    """Why no browser test can run here, or None when Chromium and Playwright are both installed."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A persistent Playwright browser context on a throwaway profile; closed and removed afterwards."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="dsclean-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
