"""`peertrain run create --follow` (issue 18): the CLI shows the run's wait for members and its
rounds until it finishes, from the daemon's `progress` in status; the daemon says the same wait in
its JSON log. Three real daemons (libp2p on loopback) in this process, the CLI a real process."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import trio
from peertrain.node.log_setup import JsonLines
from peertrain.testing import open_test_swarm, wait_until

pytestmark = pytest.mark.slow

RUN_FLAGS = [
    "--model", "mlp", "--dataset", "digits", "--inner-steps", "8", "--batch-size", "32",
    "--rounds", "3", "--min-members", "3", "--round-timeout", "20",
]  # fmt: skip


class JsonRecords(logging.Handler):
    """The daemon's log lines as `--log-format json` writes them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonLines())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def waiting(node) -> dict:
    run = node.status()["run"]
    return ((run or {}).get("progress") or {}).get("waiting") or {}


async def test_run_create_follow_shows_the_wait_for_members_then_the_rounds_to_the_end():
    records = JsonRecords()
    driver_log = logging.getLogger("peertrain.swarm.diloco.group.driver")
    driver_log.addHandler(records)
    driver_log.setLevel(logging.INFO)
    try:
        async with open_test_swarm(3) as nodes:
            await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes), timeout=20)
            command = [sys.executable, "-m", "peertrain", "run", "create", "--name", "digits"]
            follower = subprocess.Popen(  # noqa: ASYNC220 - the CLI beside the in-process daemons
                [*command, *RUN_FLAGS, "--follow", "--home", str(nodes[0].config.home)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            await wait_until(lambda: waiting(nodes[0]).get("need") == 3, timeout=60)
            assert waiting(nodes[0])["what"] == "members" and waiting(nodes[0])["have"] == 1
            await trio.sleep(2.0)  # the follower polls every 0.5 s, the log every 1 s
            for node in nodes[1:]:
                await node.runs.join("digits", timeout=30)
            with trio.fail_after(180):
                out, _ = await trio.to_thread.run_sync(follower.communicate)
    finally:
        driver_log.removeHandler(records)
    text = out.decode(errors="replace")
    assert follower.returncode == 0, text
    assert "waiting for 2 more members (have 1, need 3), " in text
    assert text.splitlines()[-1].startswith("digits  round 3/3  loss ")
    assert text.splitlines()[-1].endswith("members 3  finished")
    waits = [r for r in records.lines if r.get("event") == "waiting"]
    assert waits and waits[0]["have"] == 1 and waits[0]["need"] == 3
    assert waits[0]["msg"].startswith("waiting for 2 more members (have 1, need 3), ")
