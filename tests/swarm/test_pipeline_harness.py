"""Rebalancing in a running in-process swarm of real stage services: 4/1/1 becomes 2/2/2, movers
download their new stage's state; a joiner takes the stage with the most need, with its state."""

from __future__ import annotations

import torch
import trio
from peertrain.swarm.data.digits import DigitsDatasetConfig
from peertrain.testing import wait_until
from peertrain.testing.pipeline_harness import SwarmSpec, open_in_process_swarm

# calls padded to 16 ms per forward of 16 rows: the pad, not the noise of a loaded machine, is
# what the servers measure and announce, so equal servers look equal to the rebalancing rule
BASE_SECONDS = 1e-3


async def test_running_swarm_rebalances_and_movers_catch_up() -> None:
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=16, seed=2)
    spec = SwarmSpec(
        speeds=((1.0,) * 4, (1.0,), (1.0,)), target_batch=64, base_seconds=BASE_SECONDS
    )
    async with open_in_process_swarm(spec) as swarm:
        trainer = swarm.new_trainer(in_flight=4)
        wiring = trainer.wiring
        moves = []
        for period in range(5):
            await trainer.train(batches, steps=24, start=24 * period)
            moves.append(await swarm.rebalance(period))
        await trainer.train(batches, steps=24, start=24 * 5)
        await swarm.settle()

        assert swarm.stage_sizes == [[4, 1, 1], [3, 2, 1], [2, 2, 2]]  # then no further move
        assert [m is None for m in moves] == [False, False, True, True, True]
        assert trainer.statistics().lost == 0
        for stage in range(3):
            live = sorted(h.peer for h in swarm.members(stage))
            assert sorted(map(str, wiring[stage].peers)) == live
            # Servers of a stage hold the same parameters: the movers downloaded the stage's
            # state (a fresh slice would still hold the initial weights) and stepped with it since.
            members = swarm.members(stage)
            first = list(members[0].server.module.parameters())
            for host in members[1:]:
                for p, q in zip(first, host.server.module.parameters(), strict=True):
                    assert torch.equal(p, q)
        assert all(steps > 0 for steps in swarm.steps)


async def test_a_move_still_downloading_its_state_is_not_planned_again() -> None:
    # the servers' own loops, one period every 0.3 s; the mover's state download spans two more
    # periods, in which the view looks settled and unchanged: deciding then (as the loop did)
    # sent a second server of stage 0 to stage 1, 4/1/1 → 2/3/1, and a third move undid it
    period = 0.3
    spec = SwarmSpec(
        speeds=((1.0,) * 4, (1.0,), (1.0,)), target_batch=64, base_seconds=BASE_SECONDS
    )
    async with open_in_process_swarm(spec) as swarm:
        swarm.network.state_seconds = 2.5 * period
        async with trio.open_nursery() as nursery:
            nursery.start_soon(swarm.rebalance_every, period)
            await wait_until(lambda: swarm.sizes() == [2, 2, 2], timeout=20, what="2/2/2")
            await trio.sleep(4 * period)  # and stays
            nursery.cancel_scope.cancel()
        assert swarm.stage_sizes == [[4, 1, 1], [3, 2, 1], [2, 2, 2]]
        moves = [m for h in swarm.hosts.values() for m in h.service.moves]
        assert len(moves) == 2, moves


async def test_joiner_serves_the_stage_with_most_need_with_its_state() -> None:
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=16, seed=3)
    spec = SwarmSpec(
        speeds=((1.0, 1.0), (1.0,), (1.0, 1.0)), target_batch=32, base_seconds=BASE_SECONDS
    )
    async with open_in_process_swarm(spec) as swarm:
        trainer = swarm.new_trainer()
        wiring = trainer.wiring
        await trainer.train(batches, steps=12)
        await swarm.settle()
        assert swarm.steps[1] > 0
        peer = await swarm.join(speed=1.0)
        assert swarm.hosts[peer].stage == 1 and swarm.sizes() == [2, 2, 2]
        assert peer in wiring[1].peers
        veteran = swarm.members(1)[0].server.module.parameters()
        for p, q in zip(veteran, swarm.hosts[peer].server.module.parameters(), strict=True):
            assert torch.equal(p, q)  # trained weights, not the initial ones
        await trainer.train(batches, steps=12, start=12)
        assert trainer.statistics().lost == 0
        assert swarm.hosts[peer].server.statistics().backwards > 0  # the trainer uses it


async def test_a_perturbed_copy_resyncs_from_its_stage_in_process() -> None:
    """The drift repair of the daemons' services, here on the memory transport: a stage-0 copy
    perturbed by hand loses the next checksum comparison and re-syncs from the other two."""
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=8, seed=4)
    spec = SwarmSpec(speeds=((1.0,) * 3, (1.0,)), target_batch=48, batch_size=8)
    async with open_in_process_swarm(spec) as swarm:
        trainer = swarm.new_trainer(in_flight=4)
        await trainer.train(batches, steps=24)
        await swarm.settle()
        victim = swarm.hosts["s0-2"]
        with victim.server._lock, torch.no_grad():
            next(iter(victim.server.module.parameters())).add_(1e-3)
        await trainer.train(batches, steps=48, start=24)
        await swarm.settle()

        assert [h.service.status()["resyncs"] for h in swarm.members(0)] == [0, 0, 1]
        first = list(swarm.members(0)[0].server.module.parameters())
        for host in swarm.members(0)[1:]:
            for p, q in zip(first, host.server.module.parameters(), strict=True):
                assert torch.equal(p, q)
        assert trainer.statistics().lost == 0
