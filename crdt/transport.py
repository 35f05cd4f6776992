"""What replication needs from the network, as two small interfaces.

The `Replicator` knows nothing of libp2p: it publishes on a topic and receives through
`PubSub`, and runs anti-entropy through `Exchange` (one request, one reply, typed messages from
`sync.py`). The node wires them onto gossipsub and a `/peertrain/crdt/sync/1.0.0` stream
handler; tests use `peertrain.testing.MemoryRouter` (in memory), which drops, duplicates,
delays and reorders on purpose.

Contract for implementations: `subscribe` hands messages over through a *bounded* channel (a
slow consumer loses messages, never grows memory) and runs `validator(sender, data)` before
delivering (gossipsub: at the first hop, so invalid messages are not forwarded);
`publish` may pace and may refuse oversized data with `MessageTooLarge`; `request` raises a
`PeertrainError` (e.g. `PeerTimeout`, `RemoteError`) or `trio.TooSlowError` on failure (the
replicator also survives any other `Exception` from it, counted as a failed exchange).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from .sync import SyncReply, SyncRequest

# True: accept; False: reject (its publisher is to blame); None: drop without blame
Validator = Callable[[str, bytes], bool | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Inbound:
    """A pubsub message: `sender` is the peer the transport blames for it (base58 ID).

    The node's `Gossip` hands over its own message type with `sender` as a libp2p `ID`; the
    replicator accepts either.
    """

    sender: str
    data: bytes


class PubSub(Protocol):
    async def subscribe(
        self, topic: str, validator: Validator | None = None
    ) -> trio.abc.ReceiveChannel[Inbound]: ...

    async def publish(self, topic: str, data: bytes) -> None: ...


class Exchange(Protocol):
    def peers(self) -> Sequence[str]:
        """Peers we can reach that take part in this run (anti-entropy partners)."""
        ...

    async def request(self, peer: str, request: SyncRequest) -> SyncReply: ...
