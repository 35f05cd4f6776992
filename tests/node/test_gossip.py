"""Gossip between real in-process nodes: delivery, first-hop validation, size limits."""

from __future__ import annotations

import pytest
import trio
from peertrain.node.services.gossip import MAX_GOSSIP_MESSAGE
from peertrain.protocol.errors import MessageTooLarge
from peertrain.testing import open_test_swarm, wait_until


async def start_gossip(nursery, nodes):
    return [n.gossip for n in nodes]


async def test_a_message_reaches_every_subscriber_once(nursery):
    # the daemon's own gossip service, started with it
    async with open_test_swarm(5) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 4 for n in nodes))
        gossips = await start_gossip(nursery, nodes)
        inboxes = [await g.subscribe("t") for g in gossips]
        await wait_until(lambda: all(len(g.topic_peers("t")) >= 3 for g in gossips), timeout=10)
        await gossips[0].publish("t", b"hello")
        for inbox in inboxes[1:]:
            with trio.fail_after(5):
                msg = await inbox.receive()
            assert msg.data == b"hello" and msg.sender == nodes[0].host.get_id().to_base58()
        await trio.sleep(0.3)
        assert all(
            inbox.statistics().current_buffer_used == 0 for inbox in inboxes
        )  # no duplicates


async def test_invalid_messages_stop_at_the_first_hop_and_cost_the_forwarder(nursery):
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes))
        gossips = await start_gossip(nursery, nodes)
        # node 0 misbehaves: it has no validator and publishes what the others refuse
        inboxes = [await gossips[0].subscribe("t")] + [
            await g.subscribe("t", validator=lambda sender, data: data.startswith(b"ok"))
            for g in gossips[1:]
        ]
        await wait_until(lambda: all(len(g.topic_peers("t")) == 2 for g in gossips), timeout=10)
        await gossips[0].publish("t", b"bad")
        await gossips[0].publish("t", b"ok then")
        for inbox in inboxes[1:]:
            with trio.fail_after(5):
                assert (await inbox.receive()).data == b"ok then"
        sender = nodes[0].host.get_id().to_base58()
        assert all(n.scoreboard.score(sender) > 0 for n in nodes[1:])


async def test_oversized_publishes_are_refused_not_silently_lost(nursery):
    async with open_test_swarm(1) as nodes:
        (gossip,) = await start_gossip(nursery, nodes)
        with pytest.raises(MessageTooLarge, match="announce large payloads"):
            await gossip.publish("t", b"x" * (MAX_GOSSIP_MESSAGE + 1))
