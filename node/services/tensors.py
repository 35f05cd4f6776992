"""Serving content-addressed tensors to other nodes (fetching them: tensor_fetch.py).

`TensorStore` holds the prepared tensors this node serves (model state for joiners, outer
updates for the group, checkpoints), keyed by their root checksum and bounded by total bytes:
the least recently used unpinned tensor goes first. `TensorService` answers
`/peertrain/tensor/1.0.0` streams with protocol/tensor_transfer.py, one request per stream,
with per-peer and total limits; a peer that sends garbage is penalised. Serving is fair: a whole
serve has a deadline (a reader just above the minimum rate cannot hold a slot for hours), and
the last quarter of the slots goes only to peers holding none (a joiner is served while a few
peers read slowly).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import trio
from libp2p.abc import IHost, INetStream
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.framing import MIN_WRITE_RATE
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.tensor_transfer import serve_tensor_request
from peertrain.protocol.tensors import PreparedTensor

from ..net.penalties import PeerScoreboard, is_misbehaviour
from ..net.stream_limits import StreamSlots
from ..net.streams import reset_quietly

log = logging.getLogger(__name__)

TENSOR = protocol_id("tensor", "1.0.0")
BAD_REQUEST_PENALTY = 10.0
SERVE_DEADLINE = (
    120.0  # seconds one request may take: tensor_fetch.CHUNKS_PER_REQUEST chunks at 1 MB/s is ~17 s
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorStoreStatistics:
    tensors: int
    bytes: int
    pinned: int


class TensorStore:
    """Prepared tensors by checksum, at most `max_bytes` of unpinned payload (LRU)."""

    def __init__(self, max_bytes: int = 2 << 30):
        self.max_bytes = max_bytes
        self._items: OrderedDict[bytes, PreparedTensor] = OrderedDict()
        self._pinned: set[bytes] = set()

    def put(self, prepared: PreparedTensor, *, pin: bool = False) -> bytes:
        key = prepared.header.checksum
        self._items[key] = prepared
        self._items.move_to_end(key)
        if pin:
            self._pinned.add(key)
        self._evict()
        return key

    def get(self, checksum: bytes) -> PreparedTensor | None:
        prepared = self._items.get(checksum)
        if prepared is not None:
            self._items.move_to_end(checksum)
        return prepared

    def unpin(self, checksum: bytes) -> None:
        self._pinned.discard(checksum)
        self._evict()

    def discard(self, checksum: bytes) -> None:
        self._pinned.discard(checksum)
        self._items.pop(checksum, None)

    def _evict(self) -> None:
        unpinned = sum(p.header.nbytes for k, p in self._items.items() if k not in self._pinned)
        for key in list(self._items):
            if unpinned <= self.max_bytes:
                break
            if key not in self._pinned:
                unpinned -= self._items.pop(key).header.nbytes

    def statistics(self) -> TensorStoreStatistics:
        return TensorStoreStatistics(
            tensors=len(self._items),
            pinned=len(self._pinned),
            bytes=sum(p.header.nbytes for p in self._items.values()),
        )


class TensorService:
    """Answers tensor requests from the store."""

    def __init__(
        self,
        host: IHost,
        store: TensorStore,
        scoreboard: PeerScoreboard,
        *,
        max_total: int = 16,
        max_per_peer: int = 4,
        idle_timeout: float = 15.0,
        serve_deadline: float = SERVE_DEADLINE,
        min_rate: float = MIN_WRITE_RATE,
    ):
        self.host, self.store, self.scoreboard = host, store, scoreboard
        self.idle_timeout, self.serve_deadline, self.min_rate = (
            idle_timeout,
            serve_deadline,
            min_rate,
        )
        self._slots = StreamSlots(
            scoreboard, max_total=max_total, max_per_peer=max_per_peer, keep_free=max_total // 4
        )
        self.bytes_served = 0
        self.deadline_cuts = 0  # serves cut by `serve_deadline`

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.host.set_stream_handler(str(TENSOR), self._on_stream)
        task_status.started()
        await trio.sleep_forever()

    async def _on_stream(self, stream: INetStream) -> None:
        async with self._slots.admit(stream) as peer:
            if peer is None:
                return
            with trio.move_on_after(self.serve_deadline) as deadline:
                try:
                    await serve_tensor_request(
                        stream, self._lookup, idle_timeout=self.idle_timeout, min_rate=self.min_rate
                    )
                except ProtocolError as exc:
                    if is_misbehaviour(exc):
                        self.scoreboard.penalise(
                            peer, BAD_REQUEST_PENALTY, f"tensor request: {exc}"
                        )
            if deadline.cancelled_caught:  # slow is no misbehaviour: the slot goes, no penalty
                self.deadline_cuts += 1
                await reset_quietly(stream)
                log.info("tensor: serve to %s cut after %.0f s", peer, self.serve_deadline)

    def _lookup(self, checksum: bytes) -> PreparedTensor | None:
        prepared = self.store.get(checksum)
        if prepared is not None:
            self.bytes_served += prepared.header.nbytes  # upper bound: ranges may be partial
        return prepared
