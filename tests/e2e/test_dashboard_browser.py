"""The dashboard in a real browser: headless Chromium (Debian's `chromium`, driven by Playwright)
opens the page of a 3-node local swarm's first daemon, started with `--metrics-listen`; the same
swarm's run-wide view is read through `peertrain run show` (the member table, in the terminal).

Skips with the reason when Chromium or Playwright is missing (.ci/run installs Chromium; the
`test` extra has Playwright; `playwright install` is never needed: the system binary is used).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import free_tcp_port
from peertrain.testing.browser import CHROMIUM, launch_chromium

pytestmark = pytest.mark.slow

RUN_FLAGS = [
    "--model", "mlp", "--dataset", "digits", "--batch-size", "32", "--lr", "0.003",
    "--inner-steps", "10", "--rounds", "1000", "--min-members", "3", "--codec", "int8",
    "--set", "num_shards=3",
]  # fmt: skip
ROUND = "[data-run] [data-field=round] .value"
NAMES = ("alice-laptop", "bob-gpu", "carol's box")
ROWS = "[data-run] table.member-table tbody tr"
# the next poll redraws the charts in the narrower card, one SVG unit to a pixel
CHARTS_AT_SIZE = """[...document.querySelectorAll("svg.chart")].every(
    (chart) => Math.abs(chart.viewBox.baseVal.width - chart.clientWidth) < 2)"""


def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (`pip install playwright`, the test extra)")
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (`apt-get install chromium`; .ci/run does it)")
    return sync_playwright


def start_swarm(base: Path, port: int) -> list[DaemonProcess]:
    """Three daemons: the first serves the dashboard and creates a run the others join."""
    extra = ["--metrics-listen", f"127.0.0.1:{port}", "--name", NAMES[0]]
    first = DaemonProcess(base / "n0", node_args(extra=extra), DAEMON_ENV).start()
    daemons = [first]
    share = first.wait_ready()["share"]
    subprocess.run(
        [sys.executable, "-m", "peertrain", "run", "create", "--home", str(first.home),
         "--name", "local", "--json", *RUN_FLAGS],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    for index in (1, 2):
        tail = ["--run", "local", "--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]
        tail += ["--name", NAMES[index]]  # each owner's public name, in every member's table
        member = DaemonProcess(base / f"n{index}", ["join", share, *tail], DAEMON_ENV)
        daemons.append(member.start())
        member.wait_ready()
    return daemons


def test_the_dashboard_shows_the_swarm_and_the_round_advancing_without_a_reload(tmp_path):
    playwright_of = sync_playwright()
    port = free_tcp_port()
    daemons = start_swarm(tmp_path, port)
    try:
        with playwright_of() as playwright:
            browser = launch_chromium(playwright, tmp_path / "chromium-profile")
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/")
                watch_round_advance(page)
                check_member_table(page, daemons)
                check_diffusion_tiles(page)
                check_sample_grid(page)
                show_a_diffusion_grid(page)
                shot = tmp_path / "dashboard.png"
                page.screenshot(path=str(shot), full_page=True)
                assert distinct_colours(browser.new_page(), shot.read_bytes()) > 20
                narrow = tmp_path / "dashboard-400.png"  # the issue: readable on a narrow window
                page.set_viewport_size({"width": 400, "height": 800})
                page.wait_for_function(CHARTS_AT_SIZE)  # redrawn for the width: text not shrunk
                page.screenshot(path=str(narrow), full_page=True)
                assert png_width(narrow.read_bytes()) == 400
                assert distinct_colours(browser.new_page(), narrow.read_bytes()) > 20
                page.set_viewport_size({"width": 380, "height": 800})
                assert page.evaluate("document.documentElement.scrollWidth") <= 380
            finally:
                browser.close()
    finally:
        stop_all(daemons)


def watch_round_advance(page) -> None:
    """Three nodes in view (this one and two peers on the graph, three members in the run),
    then the round goes up on the same page: a marker set in it survives, so nothing reloaded."""
    page.wait_for_function("document.querySelectorAll('#peer-graph g.peer').length === 2")
    page.wait_for_function(
        f"document.querySelectorAll({json.dumps(ROWS)}).length === 3", timeout=120_000
    )
    page.wait_for_selector(ROUND, timeout=60_000)
    first = int(page.inner_text(ROUND))
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function(
        f"Number(document.querySelector({json.dumps(ROUND)}).textContent) > {first}",
        timeout=180_000,
    )
    assert page.evaluate("window.__sameDocument === true")
    # live: a peer's reachability check dials us from a throwaway identity for a moment (one
    # more connection, node/nat/dialback.py), so wait for the count rather than read it once
    page.wait_for_function("document.querySelector('#peer-count').textContent === '2'")
    page.wait_for_selector(".chart.loss path.curve", timeout=60_000)
    latency = "#peer-graph [data-latency]:not([data-latency=''])"
    page.wait_for_function(f"document.querySelectorAll({json.dumps(latency)}).length === 2")
    assert " ms" in page.text_content("#peer-graph")


def check_member_table(page, daemons) -> None:
    """Every member is a row of the run's table, with its public name and a round it reports
    itself; the heading tiles carry the run's length, an ETA and the members' samples/s. Then
    `peertrain run show` prints the same members from the first daemon's state."""
    rows = f"[...document.querySelectorAll({json.dumps(ROWS)})]"
    page.wait_for_function(f"{rows}.every((r) => r.children[2].textContent !== '–')")
    peers = {d.status()["peer_id"] for d in daemons}
    rows = page.eval_on_selector_all(
        ROWS, "rows => rows.map(r => [r.dataset.peer, r.children[1].textContent])"
    )
    assert {peer for peer, _ in rows} == peers
    assert sorted(name.removesuffix(" (this node)") for _, name in rows) == sorted(NAMES)
    assert page.inner_text("[data-run] [data-field=rounds] .value") == "1000"
    page.wait_for_selector("[data-run] [data-field=ETA]")  # after a round completed here
    assert float(page.inner_text("[data-run] [data-field='samples/s'] .value")) > 0
    assert " at round " in page.inner_text("[data-run] p.agreement")
    shown = subprocess.run(
        [sys.executable, "-m", "peertrain", "run", "show", "local", "--home", str(daemons[0].home)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    print(shown)  # docs/usage.md shows one such table
    lines = shown.splitlines()
    assert lines[1].startswith("agreement: ") and lines[3].split()[:2] == ["PEER", "NAME"]
    assert [line for line in lines if line.startswith("* ")][0].count(NAMES[0]) == 1
    assert all(name in shown for name in NAMES) and len(lines) == 3 + 1 + 3 + 1


def check_diffusion_tiles(page) -> None:
    """A diffusion member's run card (its status keys, node/runs/diffusion_session.py) shows its
    group and counters and no tile of a figure it lacks ("undefined" before)."""
    run = {
        "name": "flowers", "run_id": "cd" * 32, "mode": "diffusion", "members": ["QmA", "QmB"],
        "round": 4, "phase": "training", "loss": 0.42, "error": None, "dropped": {"deltas": 0},
        "group": "expert-1", "experts": 2, "bytes_published": 512, "bytes_fetched": 1024,
        "finished": False, "rounds_completed": 4, "resyncs": 1, "rejected_updates": 0,
        "progress": None,
    }  # fmt: skip
    status = {"peer_id": "QmA", "name": "me", "peer_names": {}}
    text = page.evaluate("([run, status]) => runCard(run, status).textContent", [run, status])
    assert "undefined" not in text and "NaN" not in text
    fields = page.evaluate(
        "(run) => [...figureGrid(run).children].map((c) => c.dataset.field)", run
    )
    assert fields == [
        "round",
        "members",
        "loss",
        "group",
        "sent",
        "received",
        "re-syncs",
        "rejected",
    ]


def check_sample_grid(page) -> None:
    """A diffusion run's grid, when status carries one, is an image of base64 PNG data only."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    src = page.evaluate(
        f"sampleGrid({{png: {json.dumps(png)}, round: 4}}).querySelector('img').src"
    )
    assert src == f"data:image/png;base64,{png}"
    assert page.evaluate("sampleGrid({png: 'x\" onerror=\"alert(1)'}) === null")
    assert page.evaluate("sampleGrid(undefined) === null")


def show_a_diffusion_grid(page) -> None:
    """The run card draws the grid a diffusion member renders (swarm/diffusion/sample_grid.py),
    here added to this DiLoCo run's real status on its way to the page: the browser decodes the
    PNG at its size (16 digits of 8×8 with 1-pixel gaps) and shows its round and caption."""
    from peertrain.swarm.diffusion.group_member import objective_of
    from peertrain.swarm.diffusion.run_spec import DiffusionSpec
    from peertrain.swarm.diffusion.sample_grid import render_grid

    spec = DiffusionSpec(experts=2)
    grid = render_grid(spec, {"expert-0": objective_of(spec, "expert-0").dit.eval()}, 7)

    def with_grid(route) -> None:
        response = route.fetch()
        body = response.json()
        body["run"]["sample_grid"] = grid.as_status()
        route.fulfill(response=response, json=body)

    page.route("**/api/status", with_grid)
    image = "[data-run] figure.samples img"
    page.wait_for_function(f"document.querySelector({json.dumps(image)})?.naturalWidth === 37")
    assert page.evaluate(f"document.querySelector({json.dumps(image)}).naturalHeight") == 37
    caption = page.inner_text("[data-run] figure.samples figcaption")
    assert caption.startswith("round 7 · expert-0 alone")


def png_width(png: bytes) -> int:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big")


def distinct_colours(page, png: bytes) -> int:
    """Colours in the screenshot, decoded by the browser itself (a blank page has one)."""
    data = base64.b64encode(png).decode()
    return page.evaluate(
        """async (data) => {
            const image = new Image();
            image.src = `data:image/png;base64,${data}`;
            await image.decode();
            const canvas = document.createElement("canvas");
            canvas.width = image.width; canvas.height = image.height;
            const context = canvas.getContext("2d");
            context.drawImage(image, 0, 0);
            const pixels = context.getImageData(0, 0, image.width, image.height).data;
            const seen = new Set();
            for (let i = 0; i < pixels.length; i += 4 * 7) {
                seen.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
            }
            return seen.size;
        }""",
        data,
    )
