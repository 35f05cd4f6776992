"""A trusted signer can be wrong (a stolen or buggy anchor key): its failing attestations stop
counting after a deadline, and the run goes on on the other anchors' word (group/trust.py)."""

from __future__ import annotations

import dataclasses

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from peertrain.testing.diloco_drivers import open_driver_group
from peertrain.testing.waiting import wait_until

from .test_run_trust import SPEC


async def test_an_anchor_attesting_a_state_nobody_serves_is_unreliable_and_the_run_goes_on():
    """A stolen or buggy anchor key attests a state of a far round that nobody serves: every
    member held in "downloading state" for good. After two round deadlines of failed fetches the
    anchor's attestations stop counting; the other anchor's states decide again."""
    rogue_key = create_new_key_pair()
    rogue = ID.from_pubkey(rogue_key.public_key).to_base58()
    spec = dataclasses.replace(SPEC, anchors=(rogue,), rounds=4)
    async with open_driver_group(spec) as group:
        creator, member = await group.member(group.creator), await group.member()
        await wait_until(lambda: creator.driver.progress.round >= 1, timeout=60)
        stolen = await group._replica(rogue_key)
        stolen.replicator.writer.announce(role="diloco", addrs=[], lease_ms=60_000)
        stolen.replicator.writer.provide_checkpoint(50, b"\x09" * 32)  # nobody serves it
        with trio.fail_after(120):
            await group.finished()
        for driver in (creator.driver, member.driver):
            assert driver.progress.round == spec.rounds
            assert rogue in driver.trust.unreliable_status()
        assert (
            len({creator.driver.progress.state_checksum, member.driver.progress.state_checksum})
            == 1
        )
