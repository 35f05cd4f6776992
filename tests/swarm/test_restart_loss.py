"""A restarted member reports the loss of the model it holds (the local swarm's churn run).

The swarm runner reads `status` the moment every member says it finished. A member that
restarts at (or after) the final round reaches it by resuming its own checkpoint or adopting
the group's state; `finished`, the round and the checksum must not turn final before the loss
of that state does, or the report averages in a loss measured on another model (the initial
one of a member restarted from round 0)."""

from __future__ import annotations

import dataclasses

import trio
import trio.lowlevel
from peertrain.swarm.diloco.group.driver import DiLoCoDriver
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.testing.diloco_drivers import open_driver_group

from .test_run_progress import SPEC as SMALL_SPEC

SPEC = dataclasses.replace(SMALL_SPEC, min_members=1)


async def _losses_once_finished(driver: DiLoCoDriver, seen: list) -> None:
    """Every loss `status` shows while the driver says it finished (as the runner reads it)."""
    while True:
        if driver.finished:
            seen.append((driver.progress.loss, driver.progress.state_checksum))
        await trio.lowlevel.checkpoint()


async def test_a_member_restarted_on_its_final_checkpoint_never_shows_a_stale_loss(tmp_path):
    async with open_driver_group(SPEC) as group:
        store = CheckpointStore(tmp_path / "first")
        first = (await group.member(group.creator, checkpoints=store)).driver
        await group.member()
        with trio.fail_after(120):
            await group.finished()
        trained, final = first.progress.loss, first.progress.state_checksum
        assert trained < first.progress.initial_loss
        seen: list = []
        restarted = await group.member(checkpoints=CheckpointStore(tmp_path / "first"))
        group.nursery.start_soon(_losses_once_finished, restarted.driver, seen)
        with trio.fail_after(60):
            await group.finished()
        await trio.sleep(0.2)
    assert seen and {checksum for _, checksum in seen} == {final}
    stale = [loss for loss, _ in seen if loss is None or abs(loss - trained) > 1e-4]
    assert not stale, f"finished with loss {stale[:3]}, its model's is {trained}"
