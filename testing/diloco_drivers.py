"""DiLoCo drivers in one process: real members, real Replicators on a `MemoryRouter`, real signed
deltas and update announcements, and in-memory stores that verify tensors chunk by chunk as the
node's transfers do. What a hostile stranger can do to a run's state, it does here with its own
keys (`DriverGroup.stranger`): announce memberships and checkpoints, serve tensors.

    async with open_driver_group(2, spec) as group:
        sybil = await group.stranger()
        sybil.replicator.writer.provide_checkpoint(10**9, b"\\x01" * 32)
        await group.finished()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.lowlevel
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.crdt.certificates import MemberCertificate, sign_certificate
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.crdt.manifest import RunManifest, sign_manifest
from peertrain.crdt.replicator import Penalty, Replicator, ReplicatorConfig
from peertrain.crdt.runstate import RunState
from peertrain.protocol.tensors import PreparedTensor, TensorDownload
from peertrain.swarm.diloco.adversary import adversary_for
from peertrain.swarm.diloco.group.driver import DiLoCoDriver
from peertrain.swarm.diloco.group.streaming_driver import StreamingDriver
from peertrain.swarm.diloco.member.build import build_member
from peertrain.swarm.diloco.member.checkpoint import CheckpointStore
from peertrain.swarm.diloco.member.member import DiLoCoMember
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.diloco.member.streaming import StreamingMember
from peertrain.swarm.exchange.gossip import UpdateGossip

from .crdt_network import MemoryRouter
from .memory_router import MemoryEndpoint
from .shard_network import Link, ShardNetwork
from .waiting import wait_until

UPDATES = "/peertrain/driver-group/updates"  # the run's update topic on the router
FAST = ReplicatorConfig(publish_interval=0.02, sync_interval=0.3, idle_repeat_after=0.05)


def digits_spec(**changes: Any) -> DiLoCoSpec:
    """A run that trains in seconds: an MLP on digits, 3 short int8 rounds; `changes` override."""
    settings: dict[str, Any] = dict(
        model="mlp",
        dataset="digits",
        batch_size=32,
        lr=3e-3,
        warmup_steps=2,
        rounds=3,
        round_timeout=10,
        codec="int8",
    )
    return DiLoCoSpec(**(settings | changes))


class NotServed(LookupError):
    """No holder asked has the tensor (what the node's TransferFailed says)."""


@dataclass
class TensorNetwork:
    """Every peer's served tensors; a fetch copies and verifies chunk by chunk, like the node."""

    stores: dict[str, dict[bytes, PreparedTensor]] = field(default_factory=dict)
    fetches: int = 0

    def endpoint(self, peer: str) -> MemoryTensors:
        return MemoryTensors(self, peer)

    async def fetch(self, holders: Sequence[str], checksum: bytes, max_nbytes: int, on_header=None):
        self.fetches += 1
        await trio.lowlevel.checkpoint()
        for holder in holders:
            prepared = self.stores.get(holder, {}).get(checksum)
            if prepared is None:
                continue
            download = TensorDownload(
                prepared.header, max_nbytes=max_nbytes, expected_checksum=checksum
            )
            if on_header is not None:
                on_header(download)
            raw = memoryview(prepared.payload.numpy())
            for index in range(prepared.header.num_chunks):
                offset, length = prepared.header.chunk_span(index)
                download.chunk_buffer(index)[:] = raw[offset : offset + length]
                download.verify_chunk(index)
            return download
        raise NotServed(f"none of {len(holders)} holder(s) serves {checksum.hex()[:12]}")


@dataclass
class MemoryTensors:
    """One peer's `TensorTransport` (the driver's) on a `TensorNetwork`."""

    network: TensorNetwork
    peer: str

    def put(self, prepared: PreparedTensor, *, pin: bool = True) -> None:
        self.network.stores.setdefault(self.peer, {})[prepared.header.checksum] = prepared

    def unpin(self, checksum: bytes) -> None:
        """Still served, as by the node's store (which drops it only when old or short of room)."""

    def discard(self, checksum: bytes) -> None:
        self.network.stores.get(self.peer, {}).pop(checksum, None)

    async def fetch(self, holders: Sequence[str], checksum: bytes, max_nbytes: int, on_header=None):
        return await self.network.fetch(holders, checksum, max_nbytes, on_header)


@dataclass(slots=True, kw_only=True)
class Peer:
    """A participant's keys and replica; `driver` is None for a stranger that only writes."""

    peer_id: str
    key_pair: KeyPair
    replicator: Replicator
    endpoint: MemoryEndpoint  # its place on the router: run state and update gossip both
    driver: DiLoCoDriver | None = None


@dataclass(slots=True, kw_only=True)
class DriverGroup:
    spec: DiLoCoSpec
    creator: KeyPair  # `await group.member(group.creator)`: the creator's member, the anchor
    run_id: str
    manifest: bytes
    router: MemoryRouter  # the run state's topic and the update topic (`UPDATES`), as a node has
    tensors: TensorNetwork
    nursery: trio.Nursery
    shards: ShardNetwork  # a sharded run's (`exchange = "sharded"`) transport
    members: list[Peer] = field(default_factory=list)
    gossips: dict[str, UpdateGossip] = field(default_factory=dict)  # each member's, by peer
    strangers: list[Peer] = field(default_factory=list)
    penalties: list[tuple[str, str]] = field(default_factory=list)  # (peer, reason), all peers

    @property
    def drivers(self) -> list[DiLoCoDriver]:
        return [m.driver for m in self.members if m.driver is not None]

    async def _replica(self, key_pair: KeyPair) -> Peer:
        peer_id = ID.from_pubkey(key_pair.public_key).to_base58()
        state = RunState(self.run_id)
        state.accept_manifest(self.manifest)
        endpoint = self.router.endpoint(peer_id)
        replicator = Replicator(
            state=state,
            key_pair=key_pair,
            pubsub=endpoint,
            exchange=endpoint,
            config=FAST,
            on_penalty=lambda p: self.penalties.append((p.peer, p.reason)),
        )
        endpoint.serve(replicator.handle_sync)
        await self.nursery.start(replicator.run)
        return Peer(peer_id=peer_id, key_pair=key_pair, replicator=replicator, endpoint=endpoint)

    async def member(
        self,
        key_pair: KeyPair | None = None,
        *,
        certificate: bytes = b"",
        attack: str | None = None,
        checkpoints: CheckpointStore | None = None,
        slowdown: float = 1.0,
    ) -> Peer:
        """A member with a running driver: honest, or with one `attack` on (swarm/attacks.py,
        diloco/adversary/); its checkpoints in `checkpoints` (a new member on an
        old member's store is that member restarted). A Streaming DiLoCo spec gets a
        StreamingDriver, its inner steps `slowdown` times as slow."""
        peer = await self._replica(key_pair or create_new_key_pair())
        built = await trio.to_thread.run_sync(lambda: build_member(self.spec, peer.peer_id))
        gossip = UpdateGossip(
            run_id=self.run_id,
            key_pair=peer.key_pair,
            transport=peer.endpoint.group(UPDATES),
            is_member=lambda p: True,  # the driver installs its own
            expected=lambda r: set(),
            **_update_sizes(built.member),
        )
        self.gossips[peer.peer_id] = gossip
        peer.endpoint.validate_only(UPDATES, gossip.validate, at_once=True)
        shards = self.shards.endpoint(peer.peer_id)
        shards.deliver = gossip.validate  # a sharded round's messages ride the update topic
        kind, extra = DiLoCoDriver, {}
        if self.spec.streaming:
            kind, extra = StreamingDriver, {"slowdown": slowdown}
        peer.driver = kind(
            **extra,
            spec=self.spec,
            peer_id=peer.peer_id,
            built=built,
            replicator=peer.replicator,
            gossip=gossip,
            tensors=self.tensors.endpoint(peer.peer_id),
            addrs=lambda: [],
            on_penalty=lambda p, why: self.penalties.append((p, why)),
            certificate=certificate,
            adversary=adversary_for(attack),
            checkpoints=checkpoints,
            shard_transport=shards,
        )
        self.members.append(peer)
        await peer.replicator.bootstrap()
        self.nursery.start_soon(peer.driver.run)
        return peer

    async def stranger(self, *, lease_ms: int = 60_000) -> Peer:
        """A fresh ID holding the manifest and a live membership lease, nothing else."""
        peer = await self._replica(create_new_key_pair())
        peer.replicator.writer.announce(role="diloco", addrs=[], lease_ms=lease_ms)
        self.strangers.append(peer)
        return peer

    def certificate(self, key_pair: KeyPair, *, role: str = "member") -> bytes:
        """A certificate of this run for `key_pair`'s peer, signed by the creator (invite runs)."""
        cert = MemberCertificate(
            run=self.run_id,
            peer=ID.from_pubkey(key_pair.public_key).to_base58(),
            role=role,
            expires_ms=wall_clock_ms() + 3_600_000,
        )
        return sign_certificate(self.creator, cert)

    def serve_as(self, peer: Peer, prepared: PreparedTensor) -> None:
        self.tensors.endpoint(peer.peer_id).put(prepared)

    def lose_updates(self, rule: Callable[[str, str], bool]) -> None:
        """Update gossip loses each delivery for which `rule(publisher, receiver)` holds when it
        arrives; the run state's topic still delivers (its replicas repair on their own)."""
        self.router.losses[UPDATES] = rule

    async def finished(self, within: float = 120.0) -> None:
        await wait_until(lambda: all(d.finished for d in self.drivers), timeout=within)
        await wait_until(
            lambda: all(d.progress.phase == "finished" for d in self.drivers), timeout=within
        )


def _update_sizes(member: DiLoCoMember | StreamingMember) -> dict[str, Any]:
    """The gossip's payload sizes: one for all rounds, or a streaming slot's fragment's."""
    if isinstance(member, StreamingMember):
        slots = range(1, 1 + len(member.fragments))
        return {
            "expected_nbytes": max(map(member.slot_nbytes, slots)),
            "nbytes_of": member.slot_nbytes,
        }
    return {"expected_nbytes": len(member.encoder.codec.encode(member.global_params))}


@asynccontextmanager
async def open_driver_group(
    spec: DiLoCoSpec, *, creator: KeyPair | None = None
) -> AsyncIterator[DriverGroup]:
    """A fresh DiLoCo run of `spec` created by `creator` (a new key if None), no members yet:
    add them with `await group.member()` (the creator's key first makes it the anchor)."""
    creator = creator or create_new_key_pair()
    manifest = RunManifest(
        creator=ID.from_pubkey(creator.public_key).to_base58(),
        created_ms=wall_clock_ms(),
        name="driver-group",
        mode="diloco",
        spec=spec.to_bytes(),
    )
    async with trio.open_nursery() as nursery:
        router = MemoryRouter()
        await nursery.start(router.run)
        group = DriverGroup(
            spec=spec,
            creator=creator,
            run_id=manifest.run_id,
            manifest=sign_manifest(creator, manifest),
            router=router,
            tensors=TensorNetwork(),
            nursery=nursery,
            shards=ShardNetwork(nursery, Link()),
        )
        try:
            yield group
        finally:
            nursery.cancel_scope.cancel()


__all__ = ["DriverGroup", "NotServed", "Penalty", "Peer", "open_driver_group"]
