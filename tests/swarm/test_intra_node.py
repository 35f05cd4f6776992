"""A node of several ranks behind one identity (swarm/diloco/member/intra_node.py): two processes on
gloo average their inner gradients and end every round at rank 0's θ_global."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from peertrain.testing import free_tcp_port
from peertrain.testing.intra_node import STOPPED_AFTER, reference_run

ROUNDS = 2


def run_node(tmp_path, device: str, world: int = 2) -> list[dict]:
    port = free_tcp_port()
    command = [sys.executable, "-m", "peertrain.testing.intra_node", "--world", str(world)]
    command += ["--port", str(port), "--rounds", str(ROUNDS), "--device", device]
    command += ["--out", str(tmp_path)]
    ranks = [subprocess.Popen([*command, "--rank", str(r)]) for r in range(world)]
    try:
        codes = [rank.wait(timeout=300) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    assert codes == [0] * world
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


def check_node(results: list[dict], atol: float = 1e-5) -> None:
    leader, follower = results
    # rank 1 took part in every round and in the last inner phase, which rank 0 stopped early
    # (the group overtook it): both stopped after the same step and end at rank 0's model
    assert follower["rounds"] == ROUNDS + 1
    assert leader["stopped_steps"] == STOPPED_AFTER + 1  # the step in flight when told ends
    assert torch.equal(follower["theta"].cpu(), leader["model"])
    # the node trained as one member with twice the batch: accumulation=2 in one process
    expected = reference_run(world=2, rounds=ROUNDS)
    assert torch.allclose(leader["theta"], expected, atol=atol)
    assert not torch.allclose(leader["theta"], reference_run(world=1, rounds=ROUNDS), atol=1e-3)


@pytest.mark.slow  # two processes that import torch and meet on gloo: ~25 s on 2 busy cores
def test_two_cpu_processes_on_gloo_train_as_one_member(tmp_path):
    check_node(run_node(tmp_path, "cpu"))


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="needs two CUDA devices (NCCL: one GPU per rank)",
)
def test_two_gpus_on_nccl_train_as_one_member(tmp_path):
    results = run_node(tmp_path, "cuda")
    assert [r["device"] for r in results] == ["cuda:0", "cuda:1"]
    check_node(results, atol=1e-4)  # reference on the CPU, the node on GPUs


def test_a_nodes_ranks_are_lent_to_one_run_at_a_time():
    from peertrain.swarm.diloco.member.intra_node import IntraNode, RankLease

    node = IntraNode(rank=0, world=2, device=torch.device("cpu"))
    lease = RankLease(node)
    assert lease.take("run-a") is node and lease.take("run-a") is node  # a restarted session
    assert lease.take("run-b") is None  # trains on rank 0 alone meanwhile
    lease.give_back("run-b")  # not its to give
    assert lease.holder == "run-a"
    lease.give_back("run-a")
    assert lease.take("run-b") is node
