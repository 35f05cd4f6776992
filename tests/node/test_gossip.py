"""Gossip between real in-process nodes: delivery, first-hop validation, size limits."""

from __future__ import annotations

import pytest
import trio
from peertrain.node.api.serve import serve_node
from peertrain.node.config import NodeConfig
from peertrain.node.daemon import Daemon
from peertrain.node.net.identity import Identity
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


async def test_a_restarted_node_is_heard_though_its_last_life_published_faster_than_the_clock():
    # py-libp2p numbers a node's messages from the clock's seconds, one up per message, and
    # peers drop a (sender, number) they saw in the last two minutes. A daemon publishes several
    # messages a second, so its counter runs ahead of the clock; restarted within that lead, it
    # reused numbers of its last life and every peer dropped what it said as a duplicate (seen:
    # a member killed and restarted in a churn run never got its update to anyone again).
    identity = Identity.generate()
    async with open_test_swarm(1) as (listener,):
        inbox = await listener.gossip.subscribe("t")

        async def one_life(topics: list[str], word: bytes, times: int) -> list[bytes]:
            """Start the node, say `word` `times` on each topic, stop it: what `t` heard."""
            config = NodeConfig(
                home=listener.config.home.parent / "restarted",
                listen=("/ip4/127.0.0.1/tcp/0",),
                bootstrap=(listener.addrs()[0],),
                reconnect_interval=0.2,
            )
            heard: list[bytes] = []
            async with trio.open_nursery() as life:
                node = await life.start(serve_node, Daemon(config, identity))
                await node.gossip.subscribe("t")
                await wait_until(lambda: len(node.gossip.topic_peers("t")) == 1, timeout=10)
                for topic in topics:
                    for _ in range(times):  # within each topic's burst: no pacing
                        await node.gossip.publish(topic, word)
                with trio.move_on_after(3):
                    while len(heard) < times:
                        heard.append((await inbox.receive()).data)
                life.cancel_scope.cancel()
            return heard

        # the first life says 40 things in a moment: its counter runs 40 ahead of the clock
        assert await one_life(["t", "a", "b", "c", "d"], b"first life", 8) == [b"first life"] * 8
        assert await one_life(["t"], b"second life", 1) == [b"second life"]
