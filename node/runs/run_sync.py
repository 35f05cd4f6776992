"""A run's state kept in sync: anti-entropy partners for the replicator, and the penalty for a
signed attestation of a bad state. Below session.py, so that the modes' sessions (DiLoCo,
diffusion groups, `peertrain sample`) share it without importing the session."""

from __future__ import annotations

from libp2p.abc import IHost
from libp2p.peer.id import ID
from peertrain.crdt.runstate import RunState
from peertrain.crdt.sync import SyncReply, SyncRequest
from peertrain.protocol.ids import protocol_id

from ..net.rpc import request

CRDT_SYNC = protocol_id("crdt/sync", "1.0.0")
STATE_PENALTY = (
    50.0  # a signed attestation of a state that is not finite, not the run's, or far off
)


class SyncExchange:
    """Anti-entropy partners: connected members of the run, or the peers that told us of it."""

    def __init__(self, host: IHost, state: RunState, seeds: set[str]) -> None:
        self.host, self.state, self.seeds = host, state, seeds

    def peers(self) -> list[str]:
        connected = {p.to_base58() for p in self.host.get_connected_peers()}
        members = set(self.state.members()) | self.seeds
        return sorted(connected & members)

    async def request(self, peer: str, req: SyncRequest) -> SyncReply:
        return await request(
            self.host, ID.from_base58(peer), CRDT_SYNC, req, SyncReply, timeout=10.0
        )
