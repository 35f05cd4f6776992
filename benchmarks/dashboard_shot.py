"""A screenshot of a daemon's dashboard while its run trains: headless Chromium (Debian's
`chromium`, driven by Playwright's system-browser mode, as the dashboard's browser test does).

It polls the daemon's /api/status until its run is at round `--round` or later (it gives up
when the daemon stops answering after it did, or after `--wait` seconds), then opens the page,
waits for that round and the loss chart to be drawn, and writes the whole page to OUT.
`make real-run` takes one half way through the run.

Usage: python benchmarks/dashboard_shot.py http://127.0.0.1:9464/ OUT.png [--round N]
       [--wait SECONDS]
The last line printed is one JSON object: the file, the round shown, the seconds waited.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from _report import print_json
from peertrain.testing.browser import launch_chromium

ROUND = "[data-run] [data-field=round] .value"
LOSS_CURVE = ".chart.loss path.curve"
POLL = 5.0  # seconds between status polls


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    if not reached(args.url, args.round, deadline=started + args.wait):
        print(f"the dashboard at {args.url} did not show round {args.round}")
        return 1
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        browser = launch_chromium(playwright, profile)
        try:
            page = browser.new_page()
            wait_ms = 120_000  # the round is there: the page needs a poll or two
            page.goto(args.url, timeout=wait_ms)
            page.wait_for_function(
                f"Number(document.querySelector({ROUND!r})?.textContent) >= {args.round}",
                timeout=wait_ms,
            )
            page.wait_for_selector(LOSS_CURVE, timeout=wait_ms)
            shown = page.text_content(ROUND)
            page.screenshot(path=str(args.out), full_page=True)
        finally:
            browser.close()
    print(f"dashboard at round {shown} → {args.out}")
    print_json(
        {"png": str(args.out), "round": shown, "waited_s": round(time.monotonic() - started, 1)}
    )
    return 0


def reached(url: str, round_: int, *, deadline: float) -> bool:
    """Whether the daemon's run reaches `round_` before `deadline` (False as soon as a daemon
    that answered stops answering: its run ended)."""
    answered = False
    while time.monotonic() < deadline:
        try:
            with urlopen(url.rstrip("/") + "/api/status", timeout=10) as response:
                status = json.loads(response.read())
            answered = True
        except (URLError, OSError, ValueError):
            if answered:
                return False
            status = {}
        if ((status.get("run") or {}).get("round") or 0) >= round_:
            return True
        time.sleep(POLL)
    return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--round", type=int, default=1, help="wait for this round or later")
    parser.add_argument("--wait", type=float, default=7200.0, help="seconds to wait for it")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
