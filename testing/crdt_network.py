"""In-memory transport with a seeded fault-injecting router, and a swarm of replicators on it.

`MemoryRouter` implements the `PubSub` and `Exchange` interfaces (transport.py) for many peers
in one process. Each pubsub delivery independently may be dropped, duplicated, delayed and
held back (so later messages overtake it), with probabilities from `Faults` drawn from one
seeded `random.Random`; anti-entropy requests may be lost too. Messages cross the router as
bytes: requests and replies go through the real wire codec, so sizes and decoding are real.
Inboxes are bounded; a full inbox drops (as gossipsub's queues do).

`open_memory_swarm(n)` starts n replicators of one run (node 0 creates it) on a router, each
holding the manifest and a membership lease, for tests and benchmarks.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.crdt.manifest import RunManifest, sign_manifest
from peertrain.crdt.replicator import Replicator, ReplicatorConfig
from peertrain.crdt.runstate import RunState, StateLimits
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.crdt.transport import Inbound, Validator
from peertrain.protocol.errors import PeerTimeout
from peertrain.protocol.messages import ErrorResponse, Response, check_reply, decode, encode

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see crdt/replicator.py)

Handler = Callable[[str, SyncRequest], Response]


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    drop: float = 0.0  # chance a delivery (per receiver) is lost
    duplicate: float = 0.0  # chance a delivery arrives twice
    delay: float = 0.0  # each delivery waits uniform(0, delay) seconds
    reorder: float = 0.0  # chance a delivery is held back `reorder_delay` more
    reorder_delay: float = 0.05
    request_loss: float = 0.0  # chance an anti-entropy request or its reply is lost


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


@dataclass(order=True, slots=True)
class _Scheduled:
    at: float
    order: int
    target: MemoryEndpoint = field(compare=False)
    topic: str = field(compare=False)
    message: Inbound = field(compare=False)


class MemoryRouter:
    """Routes pubsub messages and requests between `MemoryEndpoint`s; run it in a nursery."""

    def __init__(self, *, faults: Faults = Faults(), seed: int = 0, queue_size: int = 256) -> None:
        self.faults = faults
        self.queue_size = queue_size
        self.rng = random.Random(seed)
        self.stats = RouterStatistics()
        self._endpoints: dict[str, MemoryEndpoint] = {}
        self._heap: list[_Scheduled] = []
        self._order = itertools.count()
        self._wake = trio.Event()

    def endpoint(self, peer_id: str) -> MemoryEndpoint:
        ep = self._endpoints[peer_id] = MemoryEndpoint(self, peer_id)
        return ep

    def remove(self, peer_id: str) -> None:
        self._endpoints.pop(peer_id, None)

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if not self._heap:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            wait = self._heap[0].at - trio.current_time()
            if wait > 0:
                with trio.move_on_after(wait):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = trio.Event()
                continue
            item = heapq.heappop(self._heap)
            item.target._deliver(item.topic, item.message)
            await trio.lowlevel.checkpoint()

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
                heapq.heappush(
                    self._heap, _Scheduled(at, next(self._order), target, topic, message)
                )
        self._wake.set()

    async def _request(self, sender: str, peer: str, request: SyncRequest) -> SyncReply:
        f, rng = self.faults, self.rng
        self.stats.requests += 1
        raw = encode(request)
        self.stats.bytes_requested += len(raw)
        await trio.sleep(rng.uniform(0, f.delay))
        target = self._endpoints.get(peer)
        if target is None or target._handler is None or rng.random() < f.request_loss:
            self.stats.requests_lost += 1
            raise PeerTimeout(f"request to {peer} was lost", phase="memory-router")
        response = target._handler(sender, decode(raw, SyncRequest))
        raw_reply = encode(response)
        self.stats.bytes_replied += len(raw_reply)
        await trio.sleep(rng.uniform(0, f.delay))
        if rng.random() < f.request_loss:
            self.stats.requests_lost += 1
            raise PeerTimeout(f"reply from {peer} was lost", phase="memory-router")
        return check_reply(request, decode(raw_reply, (SyncReply, ErrorResponse)))


class MemoryEndpoint:
    """One peer's view of a `MemoryRouter`: implements `PubSub` and `Exchange`."""

    def __init__(self, router: MemoryRouter, peer_id: str) -> None:
        self.router = router
        self.peer_id = peer_id
        self._subscriptions: dict[
            str, tuple[trio.MemorySendChannel[Inbound], Validator | None]
        ] = {}
        self._handler: Handler | None = None

    async def subscribe(
        self, topic: str, validator: Validator | None = None
    ) -> trio.MemoryReceiveChannel[Inbound]:
        send, receive = trio.open_memory_channel[Inbound](self.router.queue_size)
        self._subscriptions[topic] = (send, validator)
        return receive

    async def publish(self, topic: str, data: bytes) -> None:
        self.router._publish(self.peer_id, topic, data)
        await trio.lowlevel.checkpoint()

    def serve(self, handler: Handler) -> None:
        self._handler = handler

    def peers(self) -> Sequence[str]:
        return [p for p in self.router._endpoints if p != self.peer_id]

    async def request(self, peer: str, request: SyncRequest) -> SyncReply:
        return await self.router._request(self.peer_id, peer, request)

    def _deliver(self, topic: str, message: Inbound) -> None:
        send, validator = self._subscriptions[topic]
        stats = self.router.stats
        if validator is not None and not validator(message.sender, message.data):
            stats.invalid += 1
            return
        try:
            send.send_nowait(message)
            stats.delivered += 1
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            stats.overflowed += 1


@dataclass(slots=True, kw_only=True)
class MemoryNode:
    peer_id: str
    key_pair: object
    state: RunState
    replicator: Replicator
    endpoint: MemoryEndpoint


def new_run(key_pair: KeyPair, *, name: str = "test-run", spec: bytes = b"") -> tuple[str, bytes]:
    """A run created by `key_pair`: (run ID, signed manifest envelope)."""
    manifest = RunManifest(
        creator=ID.from_pubkey(key_pair.public_key).to_base58(),
        created_ms=wall_clock_ms(),
        name=name,
        mode="diloco",
        spec=spec,
    )
    return manifest.run_id, sign_manifest(key_pair, manifest)


def converged(nodes: Sequence[MemoryNode]) -> bool:
    """Every node holds the manifest and the same digest."""
    return all(n.state.manifest is not None for n in nodes) and (
        len({n.state.digest() for n in nodes}) == 1
    )


@asynccontextmanager
async def open_memory_swarm(
    n: int,
    *,
    faults: Faults = Faults(),
    seed: int = 0,
    config: ReplicatorConfig | None = None,
    limits: StateLimits | None = None,
    lease_ms: int = 60_000,
) -> AsyncIterator[tuple[MemoryRouter, list[MemoryNode]]]:
    """n replicators of one fresh run (node 0 created it) on a seeded router.

    Each holds the manifest (a node learns of a run through it) and has announced itself.
    """
    router = MemoryRouter(faults=faults, seed=seed)
    keys = [create_new_key_pair() for _ in range(n)]
    run_id, manifest = new_run(keys[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(router.run)
        nodes = []
        for i, key_pair in enumerate(keys):
            peer_id = ID.from_pubkey(key_pair.public_key).to_base58()
            state = RunState(run_id, limits=limits or StateLimits())
            state.accept_manifest(manifest)  # as a node does: it found the run by its manifest
            endpoint = router.endpoint(peer_id)
            rep = Replicator(
                state=state,
                key_pair=key_pair,
                pubsub=endpoint,
                exchange=endpoint,
                config=config or ReplicatorConfig(),
                seed=seed * 1000 + i,
            )
            endpoint.serve(rep.handle_sync)
            await nursery.start(rep.run)
            rep.writer.announce(role="trainer", addrs=[f"/memory/{i}"], lease_ms=lease_ms)
            nodes.append(
                MemoryNode(
                    peer_id=peer_id,
                    key_pair=key_pair,
                    state=state,
                    replicator=rep,
                    endpoint=endpoint,
                )
            )
        try:
            yield router, nodes
        finally:
            nursery.cancel_scope.cancel()
