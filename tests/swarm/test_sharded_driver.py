"""A DiLoCo group on the sharded exchange (`exchange = "sharded"`), in process: the drivers'
real code (group/sharded_updates.py) on the one in-memory shard network, its messages through
each member's update-gossip validator as in a daemon."""

from __future__ import annotations

import trio
from peertrain.testing.diloco_drivers import digits_spec, open_driver_group

SPEC = digits_spec(exchange="sharded", min_members=4, rounds=3, inner_steps=4, num_shards=4)


def checksums(drivers) -> set:
    return {d.member.state_hash() for d in drivers}


async def test_four_members_on_the_sharded_exchange_end_with_one_model():
    async with open_driver_group(SPEC) as group:
        await group.member(group.creator)
        for _ in range(3):
            await group.member()
        with trio.fail_after(120):
            await group.finished()
        assert len(checksums(group.drivers)) == 1
        for driver in group.drivers:
            assert driver.member.round == 3 and driver.progress.rounds_alone == 0
            assert driver.sharded.transport.received > 0  # shards crossed the network
        assert not group.penalties


async def test_a_sign_flipping_member_is_outvoted_and_the_honest_agree():
    async with open_driver_group(SPEC) as group:
        await group.member(group.creator)
        for _ in range(2):
            await group.member()
        byzantine = await group.member(attack="sign-flip")
        with trio.fail_after(120):
            await group.finished()
        honest = [d for d in group.drivers if d is not byzantine.driver]
        assert len(checksums(honest)) == 1 and honest[0].member.round == 3
