"""A headless Chromium for the dashboard: Debian's `chromium` binary, driven by Playwright's
system-browser mode (no `playwright install`), with a fresh profile and none of the browser's
own network traffic (updates, sync, QUIC probes)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright: Any, profile: Path | str, *, width: int = 1280, height: int = 900):
    """A browser context on a fresh `--user-data-dir` (`profile`); close it when done."""
    return playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": width, "height": height},
    )
