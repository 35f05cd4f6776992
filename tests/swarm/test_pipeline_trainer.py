"""A whole SWARM in process (the real stage services on a memory transport): 3 stages x 2
servers, a server killed mid-run, no microbatch lost."""

from __future__ import annotations

import statistics

import trio
from peertrain.swarm.data.digits import DigitsDatasetConfig
from peertrain.testing.pipeline_harness import SwarmSpec, evaluate, open_in_process_swarm

MICROBATCHES = 360


def _mean(values: list[float | None]) -> float:
    return statistics.fmean(v for v in values if v is not None)


async def test_server_killed_mid_run_loses_no_microbatch_and_loss_falls() -> None:
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=16, seed=0)
    spec = SwarmSpec(speeds=((1.0, 1.0),) * 3, target_batch=64, base_seconds=1e-4)
    async with open_in_process_swarm(spec) as swarm:
        await _train_through_a_kill(swarm, batches, data)


async def _train_through_a_kill(swarm, batches, data) -> None:
    trainers = []
    for seed in range(2):
        trainers.append(swarm.new_trainer(seed=seed, in_flight=4))
    x_eval, y_eval = data.x[data.eval_index], data.y[data.eval_index]
    initial_loss, _ = evaluate(swarm, x_eval, y_eval)
    losses: list[list[float | None]] = [[], []]

    class KillMidRun:
        """Batches that kill a middle-stage server when microbatch 60 of trainer 0 starts."""

        batch_size = batches.batch_size

        def batch(self, step: int):
            if step == 60:
                swarm.kill("s1-0")  # microbatches are in flight through it right now
            return batches.batch(step)

    async def run(index: int) -> None:
        losses[index] = await trainers[index].train(
            KillMidRun(), steps=MICROBATCHES // 2, start=index * MICROBATCHES
        )

    async with trio.open_nursery() as nursery:
        for index in range(2):
            nursery.start_soon(run, index)

    final_loss, accuracy = evaluate(swarm, x_eval, y_eval)
    stats = [t.statistics() for t in trainers]
    assert sum(s.lost for s in stats) == 0  # lost_microbatches == 0
    assert sum(s.retries for s in stats) >= 1  # the dead server was hit and routed around
    assert sum(s.completed for s in stats) == MICROBATCHES
    assert not swarm.hosts["s1-0"].alive and swarm.sizes() == [2, 1, 2]
    assert all(swarm.steps[stage] >= 20 for stage in range(3))  # the run went on stepping
    assert final_loss < 0.6 * initial_loss, (initial_loss, final_loss)
    assert accuracy > 0.7
    early = _mean(losses[0][:20] + losses[1][:20])
    late = _mean(losses[0][-20:] + losses[1][-20:])
    assert late < 0.6 * early


async def test_killed_server_is_retried_elsewhere() -> None:
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=8, seed=1)
    async with open_in_process_swarm(SwarmSpec(speeds=((1.0, 1.0),) * 3, target_batch=32)) as swarm:
        trainer = swarm.new_trainer()
        wiring = trainer.wiring
        swarm.kill("s0-1")
        swarm.kill("s2-0")
        await trainer.train(batches, steps=20)
        stats = trainer.statistics()
        assert stats.completed == 20 and stats.lost == 0
        assert stats.retries >= 2  # each dead server was tried once, then excluded
        assert wiring[0].peers == ["s0-0"] and wiring[2].peers == ["s2-1"]
        swarm.kill("s0-0")  # a stage with no server left: microbatches are counted lost, not hung
        await trainer.train(batches, steps=3, start=20)
        assert trainer.statistics().lost == 3
