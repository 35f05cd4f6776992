"""`peertrain run leave` (issue 18): the run stops on this daemon for good (not restarted by the
supervisor, gone from status), and joining it again resumes from its own checkpoints. A real
daemon (libp2p on loopback) in this process; the CLI a real process on its control socket."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio
from peertrain.testing import open_test_swarm, wait_until

pytestmark = pytest.mark.slow  # about 30 s: two CLI processes and a run that trains

SPEC = dict(
    model="mlp", dataset="digits", inner_steps=5, batch_size=32, rounds=0, min_members=1
)  # rounds=0: until stopped


def cli(home, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "peertrain", *args, "--home", str(home)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def test_run_leave_stops_the_run_for_good_and_a_new_join_resumes_it():
    async with open_test_swarm(1) as (node,):
        await node.runs.create(name="digits", mode="diloco", spec=SPEC)
        session = node.runs.sessions[next(iter(node.runs.sessions))]
        await wait_until(lambda: node.status()["run"]["round"] >= 2, timeout=60)
        left = await trio.to_thread.run_sync(cli, node.config.home, "run", "leave", "--json")
        assert left.returncode == 0, left.stderr
        assert json.loads(left.stdout) == {"run_id": session.run_id, "name": "digits"}
        assert node.status()["run"] is None
        assert not [s for s in node.status()["services"] if s["name"].startswith("run ")]
        await trio.sleep(0.5)  # a torch job in flight ends; nothing starts after it
        stopped_at = session.driver.progress.round
        await trio.sleep(3.0)
        assert session.driver.progress.round == stopped_at, "the left run went on training"
        again = await trio.to_thread.run_sync(cli, node.config.home, "run", "leave")
        assert again.returncode == 1 and "no run" in again.stderr
        await node.runs.join("digits", timeout=30)  # returns once its driver resumed
        resumed = node.status()["run"]["round"]  # its own checkpoint, saved after each round
        assert stopped_at - 1 <= resumed and resumed >= 1
        assert node.runs.sessions[session.run_id] is not session
