"""Strangers cannot crowd the members out of a round: fresh keys are free, so no table a round
keeps is first come, first kept, and what a stranger signs is not forwarded by members."""

from __future__ import annotations

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from peertrain.swarm.exchange.gossip import UpdateAnnouncement
from peertrain.swarm.exchange.gossip_round import MAX_HOLDERS, MAX_SENDERS

from ..swarm.test_update_gossip import NBYTES, Group, forged, run_round


@pytest.fixture
def group(memory_router):  # memory_router: peertrain's pytest plugin
    return Group(memory_router)


async def test_a_flood_of_fresh_keys_announcing_ahead_cannot_crowd_out_the_members(
    group, autojump_clock
):
    """256 fresh keys announce updates for the next round before any member does: the table
    of a round's senders is full of strangers when the members' own announcements arrive. A
    member's announcement always goes in (a stranger's makes room); before, the members' were
    dropped and every round closed at its deadline with each member's own update alone."""
    members = [group.add() for _ in range(3)]
    for _ in range(MAX_SENDERS):
        key = create_new_key_pair()
        origin, raw = forged(group, members[0], key=key, round_=1)
        assert all(m.validate(origin, raw) is None for m in members)  # kept where room, unforwarded
    assert len(members[0]._rounds[1].announced) == MAX_SENDERS
    await run_round(members, round_=0, deadline=60.0)
    started = trio.current_time()
    results = await run_round(members, round_=1, deadline=60.0)
    assert trio.current_time() - started < 5.0  # not the deadline
    assert all([c.sender for c in r] == sorted(group.members) for r in results.values())


async def test_strangers_claiming_to_hold_a_members_update_cannot_push_out_its_member_holders(
    group,
):
    member, other = group.add(), group.add()
    state = other._round(0)
    ann = UpdateAnnouncement(sender=member.me, nbytes=NBYTES, checksum=b"\x02" * 32)
    state.record(member.me, ann, other.is_member)
    holds = UpdateAnnouncement(sender=member.me, nbytes=NBYTES, checksum=ann.checksum, holds=True)
    for _ in range(MAX_HOLDERS):
        stranger = forged(group, member, key=create_new_key_pair())[0]
        state.record(stranger, holds, other.is_member)
    state.record(other.me, holds, other.is_member)  # a member that holds it comes last
    assert other.me in state.holders[ann.checksum]
    assert len(state.holders[ann.checksum]) == MAX_HOLDERS
