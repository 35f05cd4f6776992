"""`peertrain sample --prompt` (issue 18): the text-sampling control call from the CLI, on the
run it names; a run that cannot sample text says so. A real daemon (libp2p on loopback) in this
process, the CLI a real process on its control socket."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio
from peertrain.testing import open_test_swarm, wait_until

pytestmark = pytest.mark.slow  # 25-55 s: two runs build, three CLI processes

TINY_GPT = dict(
    model="gpt",
    dataset="text",
    model_settings={"n_layer": 1, "n_head": 2, "n_embd": 32},
    inner_steps=2,
    batch_size=8,
    rounds=1,
    min_members=1,
)


def cli(home, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "peertrain", "sample", *args, "--home", str(home)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


async def test_sample_prompt_writes_text_from_the_named_run_and_refuses_a_digits_run():
    async with open_test_swarm(1) as (node,):
        await node.runs.create(name="tiny", mode="diloco", spec=TINY_GPT)
        await node.runs.create(
            name="digits", mode="diloco", spec=dict(model="mlp", dataset="digits", rounds=1)
        )
        await wait_until(lambda: all(s.driver for s in node.runs.sessions.values()), timeout=60)
        home = node.config.home
        text = await trio.to_thread.run_sync(
            cli, home, "--run", "tiny", "--prompt", "The ", "--tokens", "12", "--json"
        )
        refused = await trio.to_thread.run_sync(cli, home, "--run", "digits", "--prompt", "x")
        neither = await trio.to_thread.run_sync(cli, home, "--run", "tiny")
    assert text.returncode == 0, text.stderr
    sampled = json.loads(text.stdout)["text"]
    assert sampled.startswith("The ") and len(sampled.encode()) >= 4 + 12 - 3  # bytes, lossy UTF-8
    assert refused.returncode == 1 and "only GPT runs can sample text" in refused.stderr
    assert neither.returncode == 1 and "--prompt" in neither.stderr
