"""One training run inside the daemon: replicated RunState, update gossip, and the DiLoCo driver.

The swarm and crdt layers know nothing of libp2p; this module adapts the node's services to
their small interfaces: gossip topics (`Gossip`), anti-entropy requests (`rpc`), and
content-addressed tensors (`TensorStore` + `fetch_tensor`). Torch work happens in the driver's
worker threads; here we only wire.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from libp2p.peer.id import ID
from peertrain.crdt.manifest import RunManifest
from peertrain.crdt.replicator import Penalty, Replicator
from peertrain.crdt.runstate import RunState
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.protocol.ids import protocol_id

from ..net.receive_buffers import ReceiveBuffers
from ..net.rpc import request
from ..services.tensors import fetch_tensor

if TYPE_CHECKING:
    from ..daemon import Daemon

log = logging.getLogger(__name__)

CRDT_SYNC = protocol_id("crdt/sync", "1.0.0")


class SyncExchange:
    """Anti-entropy partners: connected members of the run, or the peers that told us of it."""

    def __init__(self, daemon: Daemon, state: RunState, seeds: set[str]):
        self.daemon, self.state, self.seeds = daemon, state, seeds

    def peers(self) -> list[str]:
        connected = {p.to_base58() for p in self.daemon.host.get_connected_peers()}
        members = set(self.state.members()) | self.seeds
        return sorted(connected & members)

    async def request(self, peer: str, req: SyncRequest) -> SyncReply:
        return await request(
            self.daemon.host, ID.from_base58(peer), CRDT_SYNC, req, SyncReply, timeout=10.0
        )


class NodeTensors:
    """The driver's `TensorTransport` and the update gossip's `GroupTransport` on our services."""

    def __init__(self, daemon: Daemon, topic: str, *, codec: str, block_size: int, numel: int):
        self.daemon, self.topic = daemon, topic
        self.codec, self.block_size, self.numel = codec, block_size, numel
        self.receive_buffers = ReceiveBuffers()  # peers' updates land in last rounds' memory

    async def reserve_receive_buffers(self, count: int, nbytes: int) -> None:
        """Fault in buffers for `count` incoming updates now, not during the first round."""
        await trio.to_thread.run_sync(self.receive_buffers.reserve, count, nbytes)

    # driver: whole tensors
    def put(self, prepared, *, pin: bool) -> None:
        self.daemon.tensor_store.put(prepared, pin=pin)

    def unpin(self, checksum: bytes) -> None:
        self.daemon.tensor_store.unpin(checksum)

    async def fetch(self, holders, checksum: bytes, max_nbytes: int, *, allocate=None):
        ids = [ID.from_base58(h) if isinstance(h, str) else h for h in holders]
        return await fetch_tensor(
            self.daemon.host,
            ids,
            checksum,
            max_nbytes=max_nbytes,
            scoreboard=self.daemon.scoreboard,
            allocate=allocate,
        )

    # update gossip: encoded payloads
    async def publish(self, data: bytes) -> None:
        await self.daemon.gossip.publish(self.topic, data)

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
        self.daemon.tensor_store.put(prepared)
        return prepared.header.checksum

    async def fetch_payload(self, holders, checksum: bytes, nbytes: int) -> memoryview:
        """The verified payload, served on to others as is (no copy, no second hash)."""
        from peertrain.protocol.tensors import PreparedTensor

        download = await self.fetch(
            holders, checksum, nbytes, allocate=self.receive_buffers.acquire
        )
        self.daemon.tensor_store.put(
            PreparedTensor(header=download.header, payload=download.payload)
        )
        return memoryview(download.payload.numpy())


class _UpdateTransport:
    """`GroupTransport` view of NodeTensors (its `fetch` returns payload bytes)."""

    def __init__(self, tensors: NodeTensors):
        self.tensors = tensors

    async def publish(self, data: bytes) -> None:
        await self.tensors.publish(data)

    async def serve(self, owner: str, payload) -> bytes:
        return await self.tensors.serve(owner, payload)

    async def fetch(self, holders, checksum: bytes, nbytes: int) -> bytes:
        return await self.tensors.fetch_payload(holders, checksum, nbytes)


class RunSession:
    """Everything this node does for one run. `await nursery.start(session.run)`."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        run_id: str,
        manifest_envelope: bytes,
        seeds: set[str] = frozenset(),
        role: dict[str, Any] | None = None,
    ):
        self.daemon = daemon
        self.role = dict(
            role or {}
        )  # swarm runs: {"role": "server"|"trainer", "speed": …, "stage": …}
        self.pipeline = None
        self.state = RunState(run_id)
        self.state.accept_manifest(manifest_envelope)
        self.manifest: RunManifest = self.state.manifest
        self.run_id = run_id
        self.seeds = set(seeds)
        self.replicator = Replicator(
            state=self.state,
            key_pair=daemon.identity.key_pair,
            pubsub=daemon.gossip,
            exchange=SyncExchange(daemon, self.state, self.seeds),
            on_penalty=self._penalise,
        )
        self.driver = None
        self.error: str | None = None
        self.directory = daemon.config.home / "runs" / run_id
        save_manifest(self.directory, manifest_envelope)

    def _penalise(self, penalty: Penalty) -> None:
        self.daemon.scoreboard.penalise(
            penalty.peer, penalty.points, f"run state: {penalty.reason}"
        )

    async def run(
        self, *, task_status: trio.TaskStatus[RunSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        from peertrain.swarm.diloco.build import build_member
        from peertrain.swarm.diloco.checkpoint import CheckpointStore
        from peertrain.swarm.diloco.driver import DiLoCoDriver
        from peertrain.swarm.diloco.run_spec import DiLoCoSpec
        from peertrain.swarm.diloco.update_gossip import UpdateGossip

        if self.manifest.mode == "swarm":
            await self._run_pipeline(task_status)
            return
        if self.manifest.mode != "diloco":
            raise NotImplementedError(f"mode {self.manifest.mode!r} is not served by this node yet")
        spec = DiLoCoSpec.from_bytes(self.manifest.spec)
        me = self.daemon.identity.peer_id.to_base58()
        built = await trio.to_thread.run_sync(build_member, spec, me)
        codec = built.member.encoder.codec
        numel = built.member.layout.numel
        tensors = NodeTensors(
            self.daemon,
            f"/peertrain/{self.run_id}/updates",
            codec=spec.codec,
            block_size=codec.block_size,
            numel=numel,
        )
        holder: dict[str, Any] = {}
        gossip = UpdateGossip(
            run_id=self.run_id,
            key_pair=self.daemon.identity.key_pair,
            transport=_UpdateTransport(tensors),
            expected_nbytes=codec.payload_bytes(numel),
            is_member=lambda peer: self.state.is_live(peer) or peer == me,
            expected=lambda round_: holder["driver"].expected_members(round_),
        )
        self.driver = holder["driver"] = DiLoCoDriver(
            spec=spec,
            peer_id=me,
            built=built,
            replicator=self.replicator,
            gossip=gossip,
            tensors=tensors,
            addrs=self.daemon.addrs,
            attack=self.daemon.config.attack,
            checkpoints=CheckpointStore(self.directory / "checkpoints", keep=3),
        )
        async with trio.open_nursery() as nursery:
            inbox = await self.daemon.gossip.subscribe(tensors.topic, validator=gossip.validate)
            nursery.start_soon(_drain, inbox)  # announcements act in the validator; drop the copies
            # buffers for a quorum's updates, faulted in while the first inner steps run
            nursery.start_soon(
                tensors.reserve_receive_buffers, spec.min_members - 1, codec.payload_bytes(numel)
            )
            await nursery.start(self.replicator.run)
            # joiners need the state; a restarted creator needs its own old slots back too
            await self.replicator.bootstrap()
            await nursery.start(self.driver.run)
            task_status.started(self)

    async def _run_pipeline(self, task_status: trio.TaskStatus[RunSession]) -> None:
        # started at once: importing torch and fetching a stage's state may take longer than a
        # control request may wait; `status` says "starting" meanwhile
        task_status.started(self)
        from .pipeline_session import PipelineSession

        pipeline = await trio.to_thread.run_sync(lambda: PipelineSession(self, **self.role))
        self.pipeline = pipeline
        await pipeline.run()

    async def sample(self, prompt: str, max_new_tokens: int) -> str:
        if self.driver is None:
            raise RuntimeError("the run is still starting")
        return await self.driver._thread(self.driver.built.sample, prompt, max_new_tokens)

    def status(self) -> dict[str, Any]:
        if self.manifest.mode == "swarm":
            return {
                "name": self.manifest.name,
                "run_id": self.run_id,
                "mode": self.manifest.mode,
                "creator": self.manifest.creator,
                "round": 0,
                "loss": None,
                "phase": "starting",
                "members": [],
                "error": self.error,
                **self.role,
                **(self.pipeline.status() if self.pipeline is not None else {}),
            }
        progress = self.driver.progress if self.driver else None
        live = [p for p in self.state.members() if self.state.is_live(p)]
        return {
            "name": self.manifest.name,
            "run_id": self.run_id,
            "mode": self.manifest.mode,
            "creator": self.manifest.creator,
            "members": sorted(live),
            "round": progress.round if progress else 0,
            "phase": progress.phase if progress else "starting",
            "loss": progress.loss if progress else None,
            "initial_loss": progress.initial_loss if progress else None,
            "rounds_completed": progress.rounds_completed if progress else 0,
            "state_checksum": progress.state_checksum if progress else "",
            "resyncs": progress.resyncs if progress else 0,
            "rejected_updates": progress.rejected_updates if progress else 0,
            "bytes_published": self.driver.gossip.bytes_published if self.driver else 0,
            "bytes_fetched": self.driver.gossip.bytes_fetched if self.driver else 0,
            "finished": bool(self.driver and self.driver.finished),
            "params": self.driver.member.layout.numel if self.driver else 0,
            "inner_steps": self.driver.spec.inner_steps if self.driver else 0,
            "model": self.driver.spec.model if self.driver else "",
            "error": self.error,
        }


def save_manifest(directory, envelope: bytes) -> None:
    """Keep the signed manifest, so this node can restart the run even if no peer is up."""
    import os

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / "manifest.envelope"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(envelope)
        os.replace(tmp, path)


def saved_manifests(home) -> dict[str, bytes]:
    """run ID → signed manifest envelope, for every run this home has taken part in."""
    out = {}
    for path in sorted((home / "runs").glob("*/manifest.envelope")):
        out[path.parent.name] = path.read_bytes()
    return out


async def _drain(inbox: trio.MemoryReceiveChannel) -> None:
    async for _ in inbox:
        pass
