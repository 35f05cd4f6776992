"""Gossipsub's mesh on the simulated Internet, behind the transports our replication and update
gossip are written against: the CRDT replicator's `PubSub` and `Exchange` (crdt/transport.py) and
the update gossip's `GroupTransport` (swarm/exchange/gossip.py), as `MemoryRouter` offers
them in memory, but with mesh forwarding, link costs (sim_net.py) and counters.

Gossipsub is libp2p's, so it is modelled, not run: every subscriber has mesh peers (each node
links to `degree / 2` random others, so the mean degree is gossipsub's D = 6); a message goes to
the publisher's mesh peers, and each receiver runs the topic validator (our code), delivers it
once (seen by content hash) and forwards it to its mesh peers but the one it came from.
IHAVE/IWANT gossip is left out: what eager push loses, our anti-entropy repairs, and that runs
for real. Anti-entropy partners are the mesh peers: the connected run members a node syncs with
(node/runs/run_sync.py `SyncExchange`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import blake3
import trio
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.crdt.transport import Inbound, Validator
from peertrain.protocol.errors import PeerTimeout
from peertrain.protocol.messages import ErrorResponse, check_reply, decode, encode

from .memory_router import Handler
from .sim_links import Access, draw_access, rtt_between
from .sim_net import SimNet

GOSSIP_OVERHEAD = 60  # a gossipsub RPC's framing: topic, message ID, sender, signature fields
REQUEST_TIMEOUT = 10.0  # the node's crdt/sync request timeout (node/runs/session.py)
INBOX = 256


@dataclass(slots=True)
class _Subscription:
    inbox: trio.MemorySendChannel[Inbound] | None  # None: the validator consumes the message
    validator: Validator | None


class GossipNet(SimNet):
    """`n` peers on one gossip mesh; `endpoint(i)` is peer i's transports."""

    def __init__(self, peer_ids: Sequence[str], *, seed: int = 0, degree: int = 6) -> None:
        super().__init__(seed=seed)
        rng = random.Random(seed)
        self.access: list[Access] = [draw_access(rng) for _ in peer_ids]
        self.mesh: list[set[int]] = [set() for _ in peer_ids]
        n = len(peer_ids)
        for i in range(n):
            for j in rng.sample(range(n - 1), min(n - 1, degree // 2)):
                j += j >= i  # anyone but i
                self.mesh[i].add(j)
                self.mesh[j].add(i)
        self.rtt: dict[tuple[int, int], float] = {}
        self.endpoints = [GossipEndpoint(self, i, peer) for i, peer in enumerate(peer_ids)]
        self.index = {peer: i for i, peer in enumerate(peer_ids)}
        self.duplicates = 0

    def link_rtt(self, i: int, j: int) -> float:
        key = (i, j) if i < j else (j, i)
        rtt = self.rtt.get(key)
        if rtt is None:
            rtt = self.rtt[key] = rtt_between(self.access[i], self.access[j])
        return rtt

    def send(self, i: int, j: int, nbytes: int) -> float:
        """Count a message i → j; when it arrives."""
        return self.transmit(i, self.access[i], self.access[j], self.link_rtt(i, j), nbytes)


class GossipEndpoint:
    """One peer's `PubSub` + `Exchange`; `group(topic)` is its update gossip's transport."""

    def __init__(self, net: GossipNet, index: int, peer_id: str) -> None:
        self.net, self.index, self.peer_id = net, index, peer_id
        self.alive = True
        self._subscriptions: dict[str, _Subscription] = {}
        self._seen: set[bytes] = set()
        self._handler: Handler | None = None
        self.payloads: dict[bytes, bytes] = {}

    # -- PubSub ---------------------------------------------------------------------------------

    async def subscribe(
        self, topic: str, validator: Validator | None = None
    ) -> trio.MemoryReceiveChannel[Inbound]:
        send, receive = trio.open_memory_channel[Inbound](INBOX)
        self._subscriptions[topic] = _Subscription(send, validator)
        return receive

    def validate_only(self, topic: str, validator: Validator) -> None:
        """Subscribe with a validator that consumes what it accepts (the node's update gossip)."""
        self._subscriptions[topic] = _Subscription(None, validator)

    async def publish(self, topic: str, data: bytes) -> None:
        msg_id = hashlib.blake2b(data, digest_size=16).digest()
        self._seen.add(msg_id)
        self._forward(topic, data, self.peer_id, msg_id, exclude=-1)
        await trio.lowlevel.checkpoint()

    def _forward(self, topic: str, data: bytes, origin: str, msg_id: bytes, exclude: int) -> None:
        net = self.net
        for j in net.mesh[self.index]:
            if j != exclude:
                arrive = net.send(self.index, j, len(data) + GOSSIP_OVERHEAD)
                net.at(arrive, net.endpoints[j]._receive, topic, data, origin, msg_id, self.index)

    def _receive(self, topic: str, data: bytes, origin: str, msg_id: bytes, sender: int) -> None:
        if not self.alive:
            return
        if msg_id in self._seen:
            self.net.duplicates += 1
            return
        self._seen.add(msg_id)
        sub = self._subscriptions.get(topic)
        if sub is None:
            return
        if sub.validator is not None and not sub.validator(origin, data):
            return
        if sub.inbox is not None:
            try:
                sub.inbox.send_nowait(Inbound(sender=origin, data=data))
            except trio.WouldBlock:
                pass  # a full inbox drops, as gossipsub's queues do
        self._forward(topic, data, origin, msg_id, exclude=sender)

    # -- Exchange -------------------------------------------------------------------------------

    def serve(self, handler: Handler) -> None:
        self._handler = handler

    def peers(self) -> Sequence[str]:
        net = self.net
        return [net.endpoints[j].peer_id for j in net.mesh[self.index] if net.endpoints[j].alive]

    async def request(self, peer: str, request: SyncRequest) -> SyncReply:
        net = self.net
        j = net.index[peer]
        target = net.endpoints[j]
        raw = encode(request)
        await trio.sleep_until(net.send(self.index, j, len(raw)))
        if not target.alive or target._handler is None:
            await trio.sleep(REQUEST_TIMEOUT)
            raise PeerTimeout(f"{peer} did not answer", phase="sim")
        reply = encode(target._handler(self.peer_id, decode(raw, SyncRequest)))
        await trio.sleep_until(net.send(j, self.index, len(reply)))
        return check_reply(request, decode(reply, (SyncReply, ErrorResponse)))

    # -- GroupTransport -------------------------------------------------------------------------

    def group(self, topic: str) -> GossipGroup:
        return GossipGroup(self, topic)


class GossipGroup:
    """`GroupTransport` on a `GossipEndpoint`: payloads by blake3 digest, pulled over links."""

    def __init__(self, endpoint: GossipEndpoint, topic: str) -> None:
        self.endpoint, self.topic = endpoint, topic

    async def publish(self, data: bytes) -> None:
        await self.endpoint.publish(self.topic, data)

    async def serve(self, checksum_owner: str, payload: bytes) -> bytes:
        checksum = blake3.blake3(payload).digest()
        self.endpoint.payloads[checksum] = bytes(payload)
        await trio.lowlevel.checkpoint()
        return checksum

    async def fetch(self, holders: Sequence[str], checksum: bytes, nbytes: int) -> bytes:
        me, net = self.endpoint, self.endpoint.net
        for holder in holders:
            j = net.index[holder]
            payload = net.endpoints[j].payloads.get(checksum)
            if net.endpoints[j].alive and payload is not None and len(payload) == nbytes:
                await trio.sleep_until(net.send(j, me.index, nbytes))
                me.payloads[checksum] = payload
                return payload
        raise PeerTimeout(f"no holder of {checksum.hex()[:12]} answered", phase="sim")
