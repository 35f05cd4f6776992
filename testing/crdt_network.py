"""Replicators of one run on a `MemoryRouter`: the CRDT layer's swarm in one process.

`open_memory_swarm(n)` starts n replicators of one run (node 0 creates it) on a seeded router
(memory_router.py), each holding the manifest and a membership lease, for tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.crdt.hlc import wall_clock_ms
from peertrain.crdt.manifest import RunManifest, sign_manifest
from peertrain.crdt.replicator import Replicator, ReplicatorConfig
from peertrain.crdt.runstate import RunState, StateLimits

from .memory_router import Faults, MemoryEndpoint, MemoryRouter


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
    faults: Faults | None = None,
    seed: int = 0,
    config: ReplicatorConfig | None = None,
    limits: StateLimits | None = None,
    lease_ms: int = 60_000,
) -> AsyncIterator[tuple[MemoryRouter, list[MemoryNode]]]:
    """n replicators of one fresh run (node 0 created it) on a seeded router.

    Each holds the manifest (a node learns of a run through it) and has announced itself.
    """
    router = MemoryRouter(faults=faults or Faults(), seed=seed)
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
