"""DiLoCo end to end through the CLI: daemons as processes, a run created with `peertrain run
create`, members joining with `peertrain join <peer> --run NAME`, one of them killed and
restarted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import DIGITS_MLP, wait_until_sync

pytestmark = pytest.mark.slow

# digits is small: one shard per member keeps each member's data big enough not to overfit
RUN_FLAGS = [
    *DIGITS_MLP,
    "--lr",
    "0.001",
    "--codec",
    "int8",
    "--min-members",
    "3",
    "--set",
    "num_shards=3",
]


def create_run(home, name: str, *flags: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "peertrain",
            "run",
            "create",
            "--home",
            str(home),
            "--name",
            name,
            "--json",
            *RUN_FLAGS,
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def start_group(tmp_path, name: str, *flags: str) -> list[DaemonProcess]:
    first = DaemonProcess(tmp_path / "n0", node_args(), DAEMON_ENV).start()
    addr = first.wait_ready()["share"]
    create_run(first.home, name, *flags)
    daemons = [first]
    for index in (1, 2):
        member = DaemonProcess(tmp_path / f"n{index}", join_args(addr, name), DAEMON_ENV)
        daemons.append(member.start())
        member.wait_ready()
    return daemons


def join_args(addr: str, name: str) -> list[str]:
    return ["join", addr, "--run", name, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]


def run_of(daemon: DaemonProcess) -> dict | None:
    try:
        return daemon.status(timeout=5)["run"]
    except Exception:  # noqa: BLE001 - a daemon that does not answer yet has no run; asked again
        return None


def test_three_daemons_train_together_and_agree_on_the_model(tmp_path):
    daemons = start_group(
        tmp_path, "e2e", "--inner-steps", "20", "--rounds", "4", "--round-timeout", "20"
    )
    try:
        wait_until_sync(
            lambda: all((run_of(d) or {}).get("finished") for d in daemons), timeout=150, interval=1
        )
        runs = [run_of(d) for d in daemons]
    finally:
        codes = stop_all(daemons)
    assert codes == [0, 0, 0]
    assert all(r["round"] == 4 for r in runs)
    assert len({r["state_checksum"] for r in runs}) == 1  # the same model on every member
    assert runs[0]["loss"] < 0.8 * runs[0]["initial_loss"]  # it learned


def test_a_killed_member_restarts_catches_up_and_ends_with_the_same_model(tmp_path):
    daemons = start_group(
        tmp_path, "churn", "--inner-steps", "25", "--rounds", "9", "--round-timeout", "8"
    )
    victim = daemons[2]
    try:
        wait_until_sync(
            lambda: (run_of(victim) or {}).get("round", 0) >= 2, timeout=150, interval=0.5
        )
        victim.stop(signal.SIGKILL)
        killed_at = run_of(daemons[0])["round"]
        # the others go on without it
        wait_until_sync(
            lambda: all((run_of(d) or {}).get("round", 0) >= killed_at + 2 for d in daemons[:2]),
            timeout=150,
            interval=0.5,
        )
        victim.start()  # same home, same command: `peertrain join <first> --run churn`
        wait_until_sync(
            lambda: all((run_of(d) or {}).get("finished") for d in daemons), timeout=200, interval=1
        )
        runs = [run_of(d) for d in daemons]
    finally:
        stop_all(daemons)
    assert len({r["state_checksum"] for r in runs}) == 1
    assert runs[2]["resyncs"] >= 1  # the restarted member downloaded the group's state
    assert runs[0]["loss"] < runs[0]["initial_loss"]
