"""A DiLoCo run's update exchange on the node's services: the one wiring the session and the
update-round benchmark both open (`open_update_exchange`).

swarm/diloco knows nothing of libp2p: its driver wants a `TensorTransport` (whole tensors: the
state) and its `UpdateGossip` a `GroupTransport` (announce on a topic, serve and pull encoded
payloads). `NodeTensors` provides both on the node's gossip, tensor store and `fetch_tensor`;
`UpdateTransport` is its `GroupTransport` face. The benchmark passes subclasses with clocks.
A Streaming DiLoCo run's payloads differ in size by fragment and carry a sample count before the
codec's bytes, so they travel as opaque bytes (`codec=None`: zero-padded to whole fp32 values,
the padding cut off again on arrival; the checksum the sender signs covers it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

import trio
from libp2p.peer.id import ID

from ..net.notifee import Departures
from ..net.receive_buffers import ReceiveBuffers
from ..services.node_services import NodeServices
from ..services.tensor_fetch import fetch_tensor
from .shard_transport import NodeShardTransport

if TYPE_CHECKING:
    from pathlib import Path

    from peertrain.crdt.replicator import Replicator
    from peertrain.crdt.runstate import RunState
    from peertrain.swarm.diloco.group.driver import DiLoCoDriver
    from peertrain.swarm.diloco.member.build import BuiltMember
    from peertrain.swarm.diloco.member.member import RoundReport
    from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
    from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec
    from peertrain.swarm.exchange.gossip import GroupTransport, UpdateGossip

    from .context import RunContext


def update_topic(run_id: str) -> str:
    return f"/peertrain/{run_id}/updates"


class NodeTensors:
    """The driver's `TensorTransport` and the update gossip's payloads on our services."""

    def __init__(
        self, node: NodeServices, topic: str, *, codec: str | None, block_size: int, numel: int
    ) -> None:
        """`codec`: that of every payload of `numel` values; None: payloads are opaque bytes."""
        self.node, self.topic = node, topic
        self.codec, self.block_size, self.numel = codec, block_size, numel
        self.receive_buffers = ReceiveBuffers()  # peers' updates land in last rounds' memory

    async def reserve_receive_buffers(self, count: int, nbytes: int) -> None:
        """Fault in buffers for `count` incoming updates now, not during the first round."""
        await trio.to_thread.run_sync(self.receive_buffers.reserve, count, nbytes)

    # driver: whole tensors
    def put(self, prepared, *, pin: bool) -> None:
        self.node.tensors.put(prepared, pin=pin)

    def unpin(self, checksum: bytes) -> None:
        self.node.tensors.unpin(checksum)

    def discard(self, checksum: bytes) -> None:
        self.node.tensors.discard(checksum)

    async def fetch(
        self, holders, checksum: bytes, max_nbytes: int, *, allocate=None, on_header=None
    ):
        ids = [ID.from_base58(h) if isinstance(h, str) else h for h in holders]
        return await fetch_tensor(
            self.node.host,
            ids,
            checksum,
            max_nbytes=max_nbytes,
            scoreboard=self.node.scoreboard,
            allocate=allocate,
            on_header=on_header,
            budget=self.node.budget,
        )

    # update gossip: encoded payloads
    async def publish(self, data: bytes) -> None:
        await self.node.gossip.publish(self.topic, data)

    async def serve(self, owner: str, payload) -> bytes:
        import torch
        from peertrain.protocol.tensors import prepare_encoded
        from peertrain.swarm.exchange.codec import payload_tensor

        def prepare():
            raw = payload_tensor(payload)  # our encoder's buffer itself, hashed in place
            codec, shape = self.codec, (self.numel,)
            if codec is None:  # opaque bytes as whole fp32 values
                if len(raw) % 4:  # a copy only when there is padding to add
                    raw = torch.cat([raw, raw.new_zeros(_padded(len(raw)) - len(raw))])
                codec, shape = "fp32", (len(raw) // 4,)
            return prepare_encoded(
                f"update/{owner}",
                raw,
                dtype="float32",
                shape=shape,
                codec=codec,
                block_size=self.block_size,
            )

        prepared = await trio.to_thread.run_sync(prepare)
        self.node.tensors.put(prepared)
        return prepared.header.checksum

    def local_payload(self, checksum: bytes, nbytes: int) -> memoryview | None:
        """A payload our store holds (served or fetched before), as `fetch_payload` gives it."""
        prepared = self.node.tensors.get(checksum)
        if prepared is None or prepared.header.nbytes < nbytes:
            return None
        return memoryview(prepared.payload.numpy())[:nbytes]

    async def fetch_payload(self, holders, checksum: bytes, nbytes: int) -> memoryview:
        """The verified payload, served on to others as is (no copy, no second hash)."""
        from peertrain.protocol.tensors import PreparedTensor

        padded = nbytes if self.codec is not None else _padded(nbytes)
        download = await self.fetch(
            holders, checksum, padded, allocate=self.receive_buffers.acquire
        )
        self.node.tensors.put(PreparedTensor(header=download.header, payload=download.payload))
        return memoryview(download.payload.numpy())[:nbytes]


class UpdateTransport:
    """`GroupTransport` view of NodeTensors (its `fetch` returns payload bytes)."""

    def __init__(self, tensors: NodeTensors) -> None:
        self.tensors = tensors

    async def publish(self, data: bytes) -> None:
        await self.tensors.publish(data)

    async def serve(self, owner: str, payload) -> bytes:
        return await self.tensors.serve(owner, payload)

    async def fetch(self, holders, checksum: bytes, nbytes: int) -> bytes:
        return await self.tensors.fetch_payload(holders, checksum, nbytes)


@dataclass(frozen=True, slots=True)
class RunUpdateChannels:
    """What `open_update_exchange` opens on the node for one run: the channels a driver's
    exchange (swarm/exchange/interface.py's `UpdateExchange`) travels over."""

    tensors: NodeTensors  # the driver's TensorTransport
    gossip: UpdateGossip  # `exchange(round, payload, deadline)` → every member's contribution
    reserved: trio.Event  # set once the receive buffers are faulted in
    shards: NodeShardTransport  # the sharded exchange's, when the run's spec asks for it


@asynccontextmanager
async def open_update_exchange(
    node: NodeServices,
    *,
    run_id: str,
    codec: ProtocolCodec,
    numel: int,
    is_member: Callable[[str], bool],
    expected: Callable[[int], set[str]],
    reserve_updates: int,
    encoder: ErrorFeedbackEncoder | None = None,
    tensors_class: type[NodeTensors] = NodeTensors,
    transport_class: Callable[[NodeTensors], GroupTransport] = UpdateTransport,
    nbytes: int | None = None,
    nbytes_of: Callable[[int], int] | None = None,
    shard_group: int = 0,
) -> AsyncIterator[RunUpdateChannels]:
    """Update gossip for `run_id` on the node's services, subscribed to its topic while open
    (and a sharded run's transport on the same). `codec`: the one the member encodes with.
    `is_member(peer)`: may this peer send updates; `expected(round)`: whose updates the round
    waits for. Buffers for `reserve_updates` incoming updates (and our own next one, when
    `encoder` is given: its payloads then go into the same recycled buffers) are faulted in in
    the background (`shard_group`, a sharded run's group size: its slices' and outputs'
    instead, about 2 × U). `nbytes_of(round)`: each round's payload size (at most `nbytes`)
    when they differ: opaque bytes then (Streaming DiLoCo's)."""
    from peertrain.swarm.exchange.gossip import UpdateGossip

    topic = update_topic(run_id)
    name = codec.name if nbytes_of is None else None
    tensors = tensors_class(node, topic, codec=name, block_size=codec.block_size, numel=numel)
    gossip = UpdateGossip(
        run_id=run_id,
        key_pair=node.identity.key_pair,
        transport=transport_class(tensors),
        expected_nbytes=nbytes or codec.payload_bytes(numel),
        nbytes_of=nbytes_of,
        is_member=is_member,
        expected=expected,
    )
    opaque = tensors_class(node, topic, codec=None, block_size=codec.block_size, numel=0)
    reserved = trio.Event()
    if encoder is not None:
        encoder.allocate = tensors.receive_buffers.acquire
        reserve_updates += 1

    nbytes = gossip.expected_nbytes if name else _padded(gossip.expected_nbytes)
    whole = int(encoder is not None) if shard_group else reserve_updates  # sharded: ours alone
    sizes = (whole, nbytes, shard_group)
    network = node.host.get_network()
    departures = Departures(gossip.left, gossip.back)  # the dead are not waited for
    network.register_notifee(departures)
    try:
        async with trio.open_nursery() as nursery:
            inbox = await node.gossip.subscribe(topic, validator=gossip.validate)
            nursery.start_soon(_drain, inbox)  # announcements act in the validator; drop copies
            nursery.start_soon(_reserve, tensors, opaque, codec, numel, *sizes, reserved)
            shards = NodeShardTransport(opaque, gossip.count)  # a sharded run's
            yield RunUpdateChannels(tensors, gossip, reserved, shards)
            nursery.cancel_scope.cancel()
    finally:
        network.remove_notifee(departures)


async def _reserve(
    tensors: NodeTensors,
    opaque: NodeTensors,
    codec: ProtocolCodec,
    numel: int,
    updates: int,
    nbytes: int,
    shard_group: int,
    done: trio.Event,
) -> None:
    """Fault in `updates` whole-update buffers of `nbytes` and, with `shard_group`, a sharded
    round's slice and output buffers; then set `done`."""
    if shard_group:
        size, needed = _shard_buffers(codec, numel, shard_group)
        opaque.receive_buffers.max_free = max(opaque.receive_buffers.max_free, needed)
        await opaque.reserve_receive_buffers(needed, size)
    await tensors.reserve_receive_buffers(updates, nbytes)
    done.set()


def _shard_buffers(codec: ProtocolCodec, numel: int, members: int) -> tuple[int, int]:
    """(size, count) of the receive buffers a sharded round of `members` needs: the other
    members' slices of our shard and the other owners' outputs, 2 × (members − 1), all of the
    shards' usual size (shards are cut on 64K-value windows: the odd ones, at most one or two
    of each size, get fresh memory)."""
    from collections import Counter

    from peertrain.swarm.aggregation.sharded import plan_shards

    shards = plan_shards(numel, members).shards
    sizes = Counter(_padded(codec.payload_bytes(s.stop - s.start)) for s in shards)
    return sizes.most_common(1)[0][0], 2 * (members - 1)


def open_member_exchange(node: NodeServices, state: RunState, built: BuiltMember, min_members: int):
    """The update exchange of a DiLoCo member of the group `state` replicates (a run, or one
    expert group of a diffusion run): its members are the live ones there; a quorum's receive
    buffers are faulted in while the first inner steps run."""
    from peertrain.swarm.diloco.group.roster import expected_members
    from peertrain.swarm.diloco.member.streaming import StreamingMember

    me, member = node.peer_id, built.member
    sizes: dict = {}
    if isinstance(member, StreamingMember):  # a slot's payload: its fragment's, opaque bytes
        slots = range(1, 1 + len(member.fragments))
        sizes = {"nbytes_of": member.slot_nbytes, "nbytes": max(map(member.slot_nbytes, slots))}
    return open_update_exchange(
        node,
        run_id=state.run_id,
        codec=member.encoders[0].codec if sizes else member.encoder.codec,
        numel=member.layout.numel,
        is_member=lambda peer: state.is_live(peer) or peer == me,
        expected=lambda round_: expected_members(state, me, round_),
        reserve_updates=min_members - 1,
        shard_group=min_members if built.spec.exchange == "sharded" else 0,
        # a fragment's payload gets its sample count in front: a copy, not the encoder's buffer
        encoder=None if sizes else member.encoder,
        **sizes,
    )


def member_driver(
    context: RunContext,
    exchange: RunUpdateChannels,
    *,
    spec: DiLoCoSpec,
    built: BuiltMember,
    replicator: Replicator,
    checkpoints: Path,
    keep: int,
    on_penalty: Callable[[str, str], None],
    on_round: Callable[[RoundReport], None] | None = None,
    certificate: bytes = b"",
) -> DiLoCoDriver:
    """The DiLoCo driver of a member of `context`'s run, on its `open_member_exchange`; its
    last `keep` checkpoints in `checkpoints`, within the node's disk budget. `on_penalty` hears
    of providers and attesters of a state that fails its checks; `certificate`: our member
    certificate of an invite run (`run invite`'s token, node/runs/invites.py)."""
    from peertrain.swarm.diloco.adversary import adversary_for
    from peertrain.swarm.diloco.group.driver import DiLoCoDriver
    from peertrain.swarm.diloco.group.lease import Introduction
    from peertrain.swarm.diloco.group.streaming_driver import StreamingDriver
    from peertrain.swarm.diloco.member.checkpoint import CheckpointStore

    node, choices = context.node, context.choices
    kind, extra = DiLoCoDriver, {}
    if spec.streaming:
        kind, extra = StreamingDriver, {"slowdown": choices.slowdown}
    return kind(
        **extra,
        spec=spec,
        peer_id=node.peer_id,
        built=built,
        replicator=replicator,
        gossip=exchange.gossip,
        tensors=exchange.tensors,
        addrs=node.addrs,
        adversary=adversary_for(choices.attack),
        on_round=on_round,
        checkpoints=CheckpointStore(
            checkpoints, keep=keep, room=node.budget.check_disk if node.budget else None
        ),
        on_penalty=on_penalty,
        certificate=certificate,  # ours, in an invite run
        shard_transport=exchange.shards,
        introduction=Introduction(choices.public_name, metadata.version("peertrain")),
    )


def _padded(nbytes: int) -> int:
    """Opaque bytes as whole fp32 values."""
    return -(-nbytes // 4) * 4


async def _drain(inbox: trio.MemoryReceiveChannel) -> None:
    async for _ in inbox:
        pass
