"""A DiLoCo run's update exchange on the node's services: the one wiring the session and the
update-round benchmark both open (`open_update_exchange`).

swarm/diloco knows nothing of libp2p: its driver wants a `TensorTransport` (whole tensors: the
state) and its `UpdateGossip` a `GroupTransport` (announce on a topic, serve and pull encoded
payloads). `NodeTensors` provides both on the node's gossip, tensor store and `fetch_tensor`;
`UpdateTransport` is its `GroupTransport` face. The benchmark passes subclasses with clocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from libp2p.peer.id import ID

from ..net.receive_buffers import ReceiveBuffers
from ..services.node_services import NodeServices
from ..services.tensor_fetch import fetch_tensor

if TYPE_CHECKING:
    from pathlib import Path

    from peertrain.crdt.replicator import Replicator
    from peertrain.crdt.runstate import RunState
    from peertrain.swarm.diloco.build import BuiltMember
    from peertrain.swarm.diloco.compression import ErrorFeedbackEncoder, ProtocolCodec
    from peertrain.swarm.diloco.driver import DiLoCoDriver
    from peertrain.swarm.diloco.member import RoundReport
    from peertrain.swarm.diloco.run_spec import DiLoCoSpec
    from peertrain.swarm.diloco.update_gossip import GroupTransport, UpdateGossip


def update_topic(run_id: str) -> str:
    return f"/peertrain/{run_id}/updates"


class NodeTensors:
    """The driver's `TensorTransport` and the update gossip's payloads on our services."""

    def __init__(
        self, node: NodeServices, topic: str, *, codec: str, block_size: int, numel: int
    ) -> None:
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
        from peertrain.protocol.tensors import prepare_encoded
        from peertrain.swarm.diloco.compression import payload_tensor

        def prepare():
            raw = payload_tensor(payload)  # our encoder's buffer itself, hashed in place
            return prepare_encoded(
                f"update/{owner}",
                raw,
                dtype="float32",
                shape=(self.numel,),
                codec=self.codec,
                block_size=self.block_size,
            )

        prepared = await trio.to_thread.run_sync(prepare)
        self.node.tensors.put(prepared)
        return prepared.header.checksum

    async def fetch_payload(self, holders, checksum: bytes, nbytes: int) -> memoryview:
        """The verified payload, served on to others as is (no copy, no second hash)."""
        from peertrain.protocol.tensors import PreparedTensor

        download = await self.fetch(
            holders, checksum, nbytes, allocate=self.receive_buffers.acquire
        )
        self.node.tensors.put(PreparedTensor(header=download.header, payload=download.payload))
        return memoryview(download.payload.numpy())


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
class UpdateExchange:
    tensors: NodeTensors  # the driver's TensorTransport
    gossip: UpdateGossip  # `exchange(round, payload, deadline)` → every member's contribution
    reserved: trio.Event  # set once the receive buffers are faulted in


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
) -> AsyncIterator[UpdateExchange]:
    """Update gossip for `run_id` on the node's services, subscribed to its topic while open.

    `codec`: the one the member encodes its updates with. `is_member(peer)`: may this peer send
    updates; `expected(round)`: whose updates the round waits for. Buffers for `reserve_updates`
    incoming updates (and our own next one, when `encoder` is given: the member's encoder then
    writes its payloads into the same recycled buffers) are faulted in in the background (a
    session overlaps that with its first inner steps)."""
    from peertrain.swarm.diloco.update_gossip import UpdateGossip

    topic = update_topic(run_id)
    tensors = tensors_class(node, topic, codec=codec.name, block_size=codec.block_size, numel=numel)
    gossip = UpdateGossip(
        run_id=run_id,
        key_pair=node.identity.key_pair,
        transport=transport_class(tensors),
        expected_nbytes=codec.payload_bytes(numel),
        is_member=is_member,
        expected=expected,
    )
    reserved = trio.Event()
    if encoder is not None:
        encoder.allocate = tensors.receive_buffers.acquire
        reserve_updates += 1

    async def reserve() -> None:
        await tensors.reserve_receive_buffers(reserve_updates, gossip.expected_nbytes)
        reserved.set()

    async with trio.open_nursery() as nursery:
        inbox = await node.gossip.subscribe(topic, validator=gossip.validate)
        nursery.start_soon(_drain, inbox)  # announcements act in the validator; drop the copies
        nursery.start_soon(reserve)
        yield UpdateExchange(tensors=tensors, gossip=gossip, reserved=reserved)
        nursery.cancel_scope.cancel()


def open_member_exchange(node: NodeServices, state: RunState, built: BuiltMember, min_members: int):
    """The update exchange of a DiLoCo member of the group `state` replicates (a run, or one
    expert group of a diffusion run): its members are the live ones there; a quorum's receive
    buffers are faulted in while the first inner steps run."""
    from peertrain.swarm.diloco.driver import expected_members

    me = node.peer_id
    return open_update_exchange(
        node,
        run_id=state.run_id,
        codec=built.member.encoder.codec,
        numel=built.member.layout.numel,
        is_member=lambda peer: state.is_live(peer) or peer == me,
        expected=lambda round_: expected_members(state, me, round_),
        reserve_updates=min_members - 1,
        encoder=built.member.encoder,
    )


def member_driver(
    node: NodeServices,
    exchange: UpdateExchange,
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
    """The DiLoCo driver of a member on the node's services and its `open_member_exchange`; its
    last `keep` checkpoints in `checkpoints`, within the node's disk budget. `on_penalty` hears
    of providers and attesters of a state that fails its checks; `certificate`: our member
    certificate of an invite run (`run invite`'s token, node/runs/invites.py)."""
    from peertrain.swarm.diloco.checkpoint import CheckpointStore
    from peertrain.swarm.diloco.driver import DiLoCoDriver

    return DiLoCoDriver(
        spec=spec,
        peer_id=node.peer_id,
        built=built,
        replicator=replicator,
        gossip=exchange.gossip,
        tensors=exchange.tensors,
        addrs=node.addrs,
        attack=node.attack,
        on_round=on_round,
        checkpoints=CheckpointStore(
            checkpoints, keep=keep, room=node.budget.check_disk if node.budget else None
        ),
        on_penalty=on_penalty,
        certificate=certificate,  # ours, in an invite run
    )


async def _drain(inbox: trio.MemoryReceiveChannel) -> None:
    async for _ in inbox:
        pass
