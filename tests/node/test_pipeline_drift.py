"""Stage drift between real daemons (in-process, libp2p on loopback): three servers serve stage 0,
one serves stage 1, a trainer feeds them. A stage-0 copy whose parameters are perturbed by hand
re-syncs from the other two within a few averaging rounds, and the stage ends bitwise identical;
a run left alone never re-syncs and ends identical too."""

from __future__ import annotations

import torch
import trio
from peertrain.swarm.pipeline.membership import servers as stage_servers
from peertrain.testing import open_test_swarm, wait_until

SPEC = {
    "stages": 2,
    "batch_size": 8,
    "target_batch": 48,  # a stage-0 round every 6 microbatches
    "in_flight": 4,
    "rebalance_period": 0,  # nobody moves: only a re-sync can repair a copy
    "codec": "fp32",
}
LAYOUT = [0, 0, 0, 1]


async def start(nodes, microbatches: int):
    spec = {**SPEC, "microbatches": microbatches}
    session = await nodes[0].runs.create(
        name="drift", mode="swarm", spec=spec, role={"stage": LAYOUT[0]}
    )
    for node in nodes[1:]:
        await wait_until(lambda node=node: len(node.host.get_connected_peers()) > 0, timeout=10)
    for node, stage in zip(nodes[1 : len(LAYOUT)], LAYOUT[1:], strict=True):
        await node.runs.join("drift", timeout=10, role={"role": "server", "stage": stage})
    await wait_until(lambda: len(stage_servers(session.state, 2)) == len(LAYOUT), timeout=30)
    await nodes[-1].runs.join("drift", timeout=10, role={"role": "trainer"})
    await wait_until(lambda: all(service(n) is not None for n in nodes), timeout=30)


def service(node):
    """The node's pipeline service (StageService or TrainerLoop); None until up."""
    pipeline = next(iter(node.runs.sessions.values())).pipeline
    return None if pipeline is None else pipeline.service


def params(server) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in server.server.module.parameters()])


def perturb(server) -> None:
    stage = server.server
    with stage._lock, torch.no_grad():
        next(iter(stage.module.parameters())).add_(1e-3)


async def finish(nodes) -> list:
    """Wait for the trainer to finish and stage 0's rounds to stop; stage 0's services."""
    trainer = service(nodes[-1])
    await wait_until(lambda: trainer.finished, timeout=90, interval=0.2)
    stage0 = [service(n) for n in nodes[:3]]
    rounds = None
    while rounds is None or {s.averager.completed for s in stage0} != {rounds}:
        rounds = max(s.averager.completed for s in stage0)
        await trio.sleep(0.5)  # a last round may still be gathering
    assert trainer.status()["lost_microbatches"] == 0
    return stage0


async def test_a_perturbed_stage_copy_resyncs_and_the_stage_ends_bitwise_identical():
    async with open_test_swarm(len(LAYOUT) + 1) as nodes:
        await start(nodes, microbatches=240)
        stage0 = [service(n) for n in nodes[:3]]
        victim = stage0[2]
        await wait_until(lambda: victim.averager.completed >= 3, timeout=60, interval=0.05)
        await trio.to_thread.run_sync(perturb, victim)
        perturbed_at = victim.averager.completed
        await wait_until(lambda: victim.status()["resyncs"] >= 1, timeout=60, interval=0.02)
        repaired_at = victim.averager.completed
        # its checksum after the next round differs; the round after that compares it and repairs
        assert repaired_at - perturbed_at <= 3, (perturbed_at, repaired_at)
        stage0 = await finish(nodes)
        first = params(stage0[0])
        assert all(torch.equal(params(s), first) for s in stage0)
        assert [s.status()["resyncs"] for s in stage0] == [0, 0, 1]
        assert service(nodes[3]).status()["resyncs"] == 0  # stage 1 has one server: nothing to
        assert stage0[0].averager.completed >= repaired_at + 3  # compare, and rounds went on


async def test_a_normal_run_keeps_the_stage_identical_without_resyncs():
    async with open_test_swarm(len(LAYOUT) + 1) as nodes:
        await start(nodes, microbatches=120)
        stage0 = await finish(nodes)
        first = params(stage0[0])
        assert all(torch.equal(params(s), first) for s in stage0)
        assert stage0[0].averager.completed >= 10
        for node in nodes[: len(LAYOUT)]:
            assert service(node).status()["resyncs"] == 0
        compared = [s.averager.drift.statistics() for s in stage0]
        assert all(c.compared >= 5 and c.drifted == 0 for c in compared), compared
