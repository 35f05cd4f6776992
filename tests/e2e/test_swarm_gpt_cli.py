"""SWARM for transformers end to end through the CLI: a tiny GPT cut into 3 stages (embeddings
with the first, final norm + head + loss with the last), 6 stage-server daemons and 2 trainer
daemons as separate processes (`peertrain node start`, `run create`, `run join --stage`). The loss
falls; a server killed (SIGKILL) costs retries, not microbatches; then both servers of the last
stage are stopped and restarted on their homes: nobody is left to hand them the stage's state,
so they resume from their own stage checkpoints, and the loss does not jump back to where the
run began (a head restarted from its seed predicts bytes at random: ln 256 ≈ 5.5)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import run_status

pytestmark = pytest.mark.slow

STAGES = [0, 1, 2, 0, 1, 2]  # of server daemons 0-5; daemons 6 and 7 are the trainers
SETTINGS = {  # a tiny GPT: 2 contended cores run 8 daemons
    "model_settings.n_layer": 3,
    "model_settings.n_embd": 32,
    "model_settings.n_head": 2,
    "model_settings.block_size": 32,
    "batch_size": 8,
    "target_batch": 32,
    "in_flight": 2,  # few calls queue at a server: none waits out the 10 s call timeout
    "dataset_settings.max_bytes": 300_000,  # each trainer reads this much of the stdlib
    "lr": 0.01,
    "checkpoint_every": 2,
    "rebalance_period": 0,  # stages stay as dealt: the test restarts the last one
}


def cli(daemon: DaemonProcess, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "peertrain", *args, "--home", str(daemon.home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(*calls: subprocess.Popen) -> None:
    for call in calls:
        out, _ = call.communicate(timeout=150)
        assert call.returncode == 0, out


def join(daemon: DaemonProcess, index: int) -> subprocess.Popen:
    role = ["--stage", str(STAGES[index])] if index < 6 else ["--role", "trainer"]
    return cli(daemon, "run", "join", "--run", "G", *role)


def trained(trainers: list[DaemonProcess], more_than: int) -> list[dict]:
    """The trainers' statuses once each has completed more than `more_than` microbatches."""
    runs = [run_status(t) for t in trainers]
    return runs if all(r.get("completed", 0) > more_than for r in runs) else []


def learned(trainers: list[DaemonProcess], below: float) -> list[dict]:
    """The trainers' statuses once their mean recent loss is below `below`."""
    runs = [run_status(t) for t in trainers]
    ok = all(r.get("loss") is not None for r in runs) and mean_loss(runs) < below
    return runs if ok else []


def resumed_from(servers: list[DaemonProcess]) -> list[dict]:
    """Where each server's stage state came from, once every one of them says."""
    found = [run_status(d).get("resumed") for d in servers]
    return found if all(found) else []


def mean_loss(runs: list[dict], key: str = "loss") -> float:
    return sum(r[key] for r in runs) / len(runs)


def test_a_gpt_in_three_stages_survives_a_kill_and_resumes_a_restarted_stage(tmp_path):
    started = time.monotonic()
    first = DaemonProcess(tmp_path / "n0", node_args(), DAEMON_ENV).start()
    addr = first.wait_ready(timeout=60)["share"]
    daemons = [first] + [
        DaemonProcess(tmp_path / f"n{i}", node_args(bootstrap=[addr]), DAEMON_ENV).start()
        for i in range(1, 8)
    ]
    try:
        for daemon in daemons[1:]:
            daemon.wait_ready(timeout=60)
        sets = [a for key, value in SETTINGS.items() for a in ("--set", f"{key}={value}")]
        create = ["run", "create", "--name", "G", "--mode", "swarm", "--model", "gpt"]
        finish(cli(first, *create, "--stages", "3", "--stage", "0", *sets))
        finish(*[join(d, i) for i, d in enumerate(daemons[1:], start=1)])
        trainers = daemons[6:]
        early = wait_until_sync(lambda: trained(trainers, 16), timeout=600, interval=1)
        # the stage-1 server the trainers favour so far (they would call it again): killed
        victim = max((1, 4), key=lambda i: run_status(daemons[i]).get("calls", 0))
        daemons[victim].stop(signal.SIGKILL)
        killed_at = max(r["completed"] for r in early)
        after_kill = wait_until_sync(
            lambda: trained(trainers, killed_at + 12), timeout=600, interval=1
        )
        last_stage = [daemons[2], daemons[5]]
        wait_until_sync(
            lambda: all(run_status(d).get("checkpoint_round", 0) >= 4 for d in last_stage),
            timeout=120,
            interval=0.5,
        )
        # trained far enough that a head restarted from its seed would show (ln 256 ≈ 5.5)
        initial = mean_loss(early, "initial_loss")
        before = wait_until_sync(lambda: learned(trainers, initial - 1.0), timeout=600, interval=1)
        restart_at = max(r["completed"] for r in before)
        assert stop_all(last_stage) == [0, 0]
        for daemon in last_stage:
            daemon.start()
        for daemon in last_stage:
            daemon.wait_ready(timeout=60)
        finish(join(daemons[2], 2), join(daemons[5], 5))
        resumed = wait_until_sync(lambda: resumed_from(last_stage), timeout=60, interval=0.5)
        after = wait_until_sync(lambda: trained(trainers, restart_at + 22), timeout=600, interval=1)
    finally:
        codes = stop_all([d for d in daemons if d.process and d.process.returncode is None])
    print(
        f"wall {time.monotonic() - started:.1f} s; initial {mean_loss(early, 'initial_loss'):.3f}"
        f" before {mean_loss(before):.3f} after {mean_loss(after):.3f}; resumed {resumed}"
    )
    assert codes == [0] * 7  # every daemon but the killed one stopped cleanly
    assert initial > 3.5  # the mean of the first 20 microbatches; at random: ln 256 ≈ 5.55
    assert mean_loss(before) < initial - 1.0  # it learned
    assert all(r["lost_microbatches"] == 0 for r in after_kill)  # the kill cost retries only
    assert sum(r["retries"] for r in after_kill) >= 1
    # nobody was left to hand the last stage its state: its servers read their checkpoints
    assert all(r and r["from"] in ("checkpoint", "peer") and r["round"] >= 4 for r in resumed)
    assert any(r["from"] == "checkpoint" for r in resumed)
    # the first microbatches after the restart: near the loss before it, far from the initial
    loss_before, loss_after = mean_loss(before), mean_loss(after)
    assert loss_after < loss_before + 0.3 * (initial - loss_before), (loss_before, loss_after)
    assert all(r["lost_microbatches"] == 0 for r in after)  # trainers waited for the stage
