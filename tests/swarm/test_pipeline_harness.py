"""Rebalancing in a running swarm: 4/1/1 becomes 2/2/2, movers download their new stage's state."""

from __future__ import annotations

import torch
from peertrain.swarm.data.digits import DigitsDatasetConfig
from peertrain.swarm.pipeline.harness import InProcessSwarm, SwarmSpec
from peertrain.swarm.pipeline.trainer import PipelineTrainer, TrainerConfig
from peertrain.swarm.pipeline.wiring import PipelineWiring


async def test_running_swarm_rebalances_and_movers_catch_up() -> None:
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=16, seed=2)
    swarm = InProcessSwarm(
        SwarmSpec(speeds=((1.0,) * 4, (1.0,), (1.0,)), target_batch=64, base_seconds=1e-4)
    )
    wiring = PipelineWiring(3, seed=0)
    swarm.attach(wiring)
    trainer = PipelineTrainer(
        num_stages=3, transport=swarm, wiring=wiring, config=TrainerConfig(in_flight=4)
    )
    moves = []
    for period in range(5):
        await trainer.train(batches, steps=24, start=24 * period)
        moves.append(await swarm.rebalance(period))
    await trainer.train(batches, steps=24, start=24 * 5)

    assert swarm.stage_sizes == [[4, 1, 1], [3, 2, 1], [2, 2, 2]]  # then no further move
    assert [m is None for m in moves] == [False, False, True, True, True]
    assert trainer.statistics().lost == 0
    for stage in range(3):
        assert sorted(map(str, wiring[stage].peers)) == sorted(
            h.peer for h in swarm.members(stage)
        )
        # Servers of a stage hold the same parameters: the movers downloaded the stage's state
        # (a fresh slice would still hold the initial weights) and stepped with it since.
        members = swarm.members(stage)
        first = list(members[0].server.module.parameters())
        for host in members[1:]:
            for p, q in zip(first, host.server.module.parameters(), strict=True):
                assert torch.allclose(p, q, atol=1e-5)
    assert all(steps > 0 for steps in swarm.steps)
