"""One in-memory network for the transports the libp2p-free layers are written against.

`MemoryRouter` connects many peers in one process; each peer's `MemoryEndpoint` implements
  - the CRDT replicator's `PubSub` and `Exchange` (crdt/transport.py), and
  - through `endpoint.group(topic)`, the update gossip's `GroupTransport`
    (swarm/exchange/gossip.py): announce on a topic, serve payloads by checksum, fetch them
    from holders.
Faults come from `Faults`, drawn from one seeded `random.Random`: each pubsub delivery may be
dropped, duplicated, delayed and held back (so later messages overtake it); a request, its reply
or a payload fetch may be lost. A test that needs one chosen loss instead (the anchor's updates
to one member during one round) puts a rule in `router.losses[topic]`. Messages cross as bytes
and requests through the real wire codec, so sizes and decoding are real. Inboxes are bounded;
a full inbox drops, as gossipsub's queues do. With `uplink` (bytes/s) every payload a peer
serves leaves through its own TokenBucket (shaped_link.py): a home uplink, for measuring what
overlapping communication buys.
One router rather than one fake per interface, so a test can put a CRDT replica and a DiLoCo
member of the same peer on the same lossy network.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import blake3
import trio
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.crdt.transport import Inbound, Validator
from peertrain.protocol.errors import PeerTimeout
from peertrain.protocol.messages import ErrorResponse, Response, check_reply, decode, encode

from .shaped_link import TokenBucket
from .timeline import Timeline

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see crdt/replicator.py)

Handler = Callable[[str, SyncRequest], Response]


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    drop: float = 0.0  # chance a delivery (per receiver) is lost
    duplicate: float = 0.0  # chance a delivery arrives twice
    delay: float = 0.0  # each delivery, request and fetch waits uniform(0, delay) seconds
    reorder: float = 0.0  # chance a delivery is held back `reorder_delay` more
    reorder_delay: float = 0.05
    request_loss: float = 0.0  # chance a request, its reply, or a fetch from one holder is lost


@dataclass(slots=True)
class RouterStatistics:
    published: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    overflowed: int = 0
    invalid: int = 0
    requests: int = 0
    requests_lost: int = 0
    bytes_published: int = 0
    bytes_requested: int = 0
    bytes_replied: int = 0
    fetches: int = 0
    bytes_fetched: int = 0


@dataclass(slots=True)
class _Subscription:
    inbox: trio.MemorySendChannel[Inbound] | None  # None: the validator consumes the message
    validator: Validator | None
    at_once: bool = False  # a delivery due now is made inside the publisher's `publish`


class MemoryRouter:
    """Routes pubsub messages, requests and payload fetches between `MemoryEndpoint`s; run it
    in a nursery (`await nursery.start(router.run)`, or `open_memory_router()`)."""

    def __init__(
        self,
        *,
        faults: Faults = Faults(),
        seed: int = 0,
        queue_size: int = 256,
        uplink: float | None = None,
    ) -> None:
        self.faults = faults
        self.uplink = uplink
        self.links: dict[str, TokenBucket] = {}  # peer → its uplink, when shaped
        self.queue_size = queue_size
        self.rng = random.Random(seed)
        self.stats = RouterStatistics()
        self._endpoints: dict[str, MemoryEndpoint] = {}
        self._timeline = Timeline()  # pubsub deliveries, one per checkpoint
        # a test's own losses beside the drawn ones, per topic: rule(publisher, receiver) → True
        # drops that delivery. Asked when the message arrives, so a rule on the receiver's state
        # ("while it is in round 1") reads the state the message meets.
        self.losses: dict[str, Callable[[str, str], bool]] = {}

    def endpoint(self, peer_id: str) -> MemoryEndpoint:
        ep = self._endpoints[peer_id] = MemoryEndpoint(self, peer_id)
        return ep

    def remove(self, peer_id: str) -> None:
        self._endpoints.pop(peer_id, None)

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._timeline.run(task_status=task_status)

    def _publish(self, sender: str, topic: str, data: bytes) -> None:
        f, rng, now = self.faults, self.rng, trio.current_time()
        self.stats.published += 1
        self.stats.bytes_published += len(data)
        for target in list(self._endpoints.values()):
            if target.peer_id == sender or topic not in target._subscriptions:
                continue
            if rng.random() < f.drop:
                self.stats.dropped += 1
                continue
            copies = 2 if rng.random() < f.duplicate else 1
            self.stats.duplicated += copies - 1
            for _ in range(copies):
                at = now + rng.uniform(0, f.delay)
                if rng.random() < f.reorder:
                    at += f.reorder_delay
                message = Inbound(sender=sender, data=data)
                if at <= now and target._subscriptions[topic].at_once:
                    target._deliver(topic, message)
                else:
                    self._timeline.at(at, target._deliver, topic, message)

    def _lost(self) -> bool:
        lost = self.rng.random() < self.faults.request_loss
        self.stats.requests_lost += lost
        return lost

    async def _latency(self) -> None:
        await trio.sleep(self.rng.uniform(0, self.faults.delay))

    async def _request(self, sender: str, peer: str, request: SyncRequest) -> SyncReply:
        self.stats.requests += 1
        raw = encode(request)
        self.stats.bytes_requested += len(raw)
        await self._latency()
        target = self._endpoints.get(peer)
        if target is None or target._handler is None or self._lost():
            raise PeerTimeout(f"request to {peer} was lost", phase="memory-router")
        response = target._handler(sender, decode(raw, SyncRequest))
        raw_reply = encode(response)
        self.stats.bytes_replied += len(raw_reply)
        await self._latency()
        if self._lost():
            raise PeerTimeout(f"reply from {peer} was lost", phase="memory-router")
        return check_reply(request, decode(raw_reply, (SyncReply, ErrorResponse)))

    async def _fetch(self, holders: Sequence[str], checksum: bytes, nbytes: int) -> bytes:
        """The payload from the first holder that has it and whose answer is not lost."""
        for holder in holders:
            self.stats.fetches += 1
            await self._latency()
            target = self._endpoints.get(holder)
            payload = target._payloads.get(checksum) if target is not None else None
            if payload is None or len(payload) != nbytes or self._lost():
                continue
            if blake3.blake3(payload).digest() != checksum:  # a lying holder, as the node sees it
                continue
            if self.uplink is not None:
                link = self.links.setdefault(holder, TokenBucket(self.uplink))
                await link.take(len(payload))
            self.stats.bytes_fetched += len(payload)
            return payload
        raise PeerTimeout(f"no holder of {checksum.hex()[:12]} answered", phase="memory-router")


@asynccontextmanager
async def open_memory_router(
    *,
    faults: Faults = Faults(),
    seed: int = 0,
    queue_size: int = 256,
    uplink: float | None = None,
) -> AsyncIterator[MemoryRouter]:
    """A running `MemoryRouter`, stopped on exit."""
    router = MemoryRouter(faults=faults, seed=seed, queue_size=queue_size, uplink=uplink)
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        yield router
        nursery.cancel_scope.cancel()


class MemoryEndpoint:
    """One peer's view of a `MemoryRouter`: implements `PubSub` and `Exchange`; `group(topic)`
    is its update gossip's `GroupTransport`."""

    def __init__(self, router: MemoryRouter, peer_id: str) -> None:
        self.router = router
        self.peer_id = peer_id
        self._subscriptions: dict[str, _Subscription] = {}
        self._handler: Handler | None = None
        self._payloads: dict[bytes, bytes] = {}  # checksum → payload this peer serves

    # -- PubSub ---------------------------------------------------------------------------------

    async def subscribe(
        self, topic: str, validator: Validator | None = None
    ) -> trio.MemoryReceiveChannel[Inbound]:
        send, receive = trio.open_memory_channel[Inbound](self.router.queue_size)
        self._subscriptions[topic] = _Subscription(send, validator)
        return receive

    async def publish(self, topic: str, data: bytes) -> None:
        self.router._publish(self.peer_id, topic, data)
        await trio.lowlevel.checkpoint()

    # -- Exchange -------------------------------------------------------------------------------

    def serve(self, handler: Handler) -> None:
        self._handler = handler

    def peers(self) -> Sequence[str]:
        return [p for p in self.router._endpoints if p != self.peer_id]

    async def request(self, peer: str, request: SyncRequest) -> SyncReply:
        return await self.router._request(self.peer_id, peer, request)

    # -- GroupTransport -------------------------------------------------------------------------

    def group(self, topic: str) -> MemoryGroupTransport:
        return MemoryGroupTransport(self, topic)

    def validate_only(self, topic: str, validator: Validator, *, at_once: bool = False) -> None:
        """Subscribe with a validator that consumes what it accepts (the node's update gossip
        acts in its validator and drains the inbox). `at_once`: a delivery with no delay drawn
        is validated inside the publisher's `publish`, the zero-latency limit; with no inbox to
        drain there is nothing to yield for, and a test's `lose` rule then lands in the round it
        names rather than whenever the delivery loop next runs under load."""
        self._subscriptions[topic] = _Subscription(None, validator, at_once)

    def _deliver(self, topic: str, message: Inbound) -> None:
        subscription = self._subscriptions[topic]
        stats = self.router.stats
        lose = self.router.losses.get(topic)
        if lose is not None and lose(message.sender, self.peer_id):
            stats.dropped += 1
            return
        validator = subscription.validator
        if validator is not None and not validator(message.sender, message.data):
            stats.invalid += 1
            return
        if subscription.inbox is None:
            stats.delivered += 1
            return
        try:
            subscription.inbox.send_nowait(message)
            stats.delivered += 1
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            stats.overflowed += 1


class MemoryGroupTransport:
    """`GroupTransport` on a `MemoryEndpoint`: payloads addressed by their blake3 digest, as the
    node's tensor store addresses them; a fetched payload is served on, like the node's."""

    def __init__(self, endpoint: MemoryEndpoint, topic: str) -> None:
        self.endpoint, self.topic = endpoint, topic

    async def publish(self, data: bytes) -> None:
        await self.endpoint.publish(self.topic, data)

    async def serve(self, checksum_owner: str, payload: bytes) -> bytes:
        payload = bytes(payload)
        checksum = blake3.blake3(payload).digest()
        self.endpoint._payloads[checksum] = payload
        await trio.lowlevel.checkpoint()
        return checksum

    async def fetch(self, holders: Sequence[str], checksum: bytes, nbytes: int) -> bytes:
        payload = await self.endpoint.router._fetch(holders, checksum, nbytes)
        self.endpoint._payloads[checksum] = payload
        return payload
