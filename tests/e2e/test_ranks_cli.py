"""A node of two ranks (`--ranks 2`: torch.distributed on gloo inside, one peer ID outside)
trains a DiLoCo run through the CLI with a plain node; its follower takes part in every round
and ends with the node (swarm/diloco/member/intra_node.py, node/cli/ranks.py)."""

from __future__ import annotations

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import peertrain_cli, run_status

pytestmark = pytest.mark.slow

RUN_FLAGS = ["--model", "mlp", "--dataset", "digits", "--batch-size", "16", "--lr", "0.003"]
RUN_FLAGS += ["--inner-steps", "10", "--rounds", "2", "--min-members", "2", "--round-timeout", "30"]


def cli(home, *args: str) -> None:
    peertrain_cli(*args, "--home", str(home), env=DAEMON_ENV, timeout=300)


def test_a_node_of_two_ranks_trains_with_a_plain_node_and_its_follower_ends_with_it(tmp_path):
    ranked = DaemonProcess(
        tmp_path / "ranked", node_args(extra=["--ranks", "2", "--device", "cpu"]), DAEMON_ENV
    ).start()
    addr = ranked.wait_ready(timeout=120)["share"]
    plain = DaemonProcess(tmp_path / "plain", node_args(bootstrap=[addr]), DAEMON_ENV).start()
    plain.wait_ready()
    daemons = [ranked, plain]
    try:
        cli(ranked.home, "run", "create", "--name", "ranks", *RUN_FLAGS)
        cli(plain.home, "run", "join", "--run", "ranks")
        wait_until_sync(
            lambda: all(run_status(d).get("finished") for d in daemons), timeout=240, interval=1
        )
        runs = [run_status(d) for d in daemons]
    finally:
        codes = stop_all(daemons)
    assert codes == [0, 0]
    assert len({r["state_checksum"] for r in runs}) == 1 and runs[0]["round"] == 2
    assert runs[0]["loss"] < runs[0]["initial_loss"]
    assert (runs[0]["ranks"], runs[0]["device"], runs[1]["ranks"]) == (2, "cpu", 1)
    log = (ranked.home / "daemon.log").read_text()
    assert "run " in log and "trains on 2 ranks" in log
    assert "rank 1/2 on cpu: followed a run for 2 rounds" in log
    assert "rank 1/2 on cpu: the node stopped" in log  # it ended with the daemon, not killed
