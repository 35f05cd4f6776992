"""Serving content-addressed tensors to other nodes (fetching them: tensor_fetch.py).

`TensorStore` holds the prepared tensors this node serves (model state for joiners, outer
updates for the group, checkpoints), keyed by their root checksum and bounded by total bytes
(the least recently used unpinned tensor goes first) and by age: an unpinned tensor nobody
asked for in `max_age` seconds is dropped. Bytes alone were no bound in practice: a run's
rounds left their updates and replaced states behind until 2 GiB, and an hour-long soak's
daemons grew 150-175 MB an hour with a 120k-parameter model (no round needs an update past its
round's deadline, nor a joiner a state older than the newest). `TensorService` answers
`/peertrain/tensor/1.0.0` streams with protocol/tensor_transfer.py, one request per stream,
with per-peer and total limits; a peer that sends garbage is penalised. Serving is fair: a whole
serve has a deadline (a reader just above the minimum rate cannot hold a slot for hours), and
the last quarter of the slots goes only to peers holding none (a joiner is served while a few
peers read slowly).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
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


MAX_AGE = 600.0  # seconds an unpinned tensor is kept since it was last put or asked for


class TensorStore:
    """Prepared tensors by checksum, at most `max_bytes` of unpinned payload (LRU), none of it
    unused for more than `max_age` seconds (`clock`: trio's, or the monotonic one outside)."""

    def __init__(
        self,
        max_bytes: int = 2 << 30,
        *,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_bytes, self.max_age, self.clock = max_bytes, max_age, clock
        self._items: OrderedDict[bytes, PreparedTensor] = OrderedDict()  # least recent first
        self._used: dict[bytes, float] = {}  # when each was last put or asked for
        self._pinned: set[bytes] = set()
        self._unpinned_bytes = 0

    def put(self, prepared: PreparedTensor, *, pin: bool = False) -> bytes:
        key = prepared.header.checksum
        pin = pin or key in self._pinned  # a pin stays until unpinned
        self._remove(key)
        self._items[key] = prepared
        self._used[key] = self.clock()
        if pin:
            self._pinned.add(key)
        else:
            self._unpinned_bytes += prepared.header.nbytes
        self._evict()
        return key

    def get(self, checksum: bytes) -> PreparedTensor | None:
        prepared = self._items.get(checksum)
        if prepared is not None:
            self._items.move_to_end(checksum)
            self._used[checksum] = self.clock()
        return prepared

    def unpin(self, checksum: bytes) -> None:
        if checksum in self._pinned and checksum in self._items:
            self._pinned.discard(checksum)
            self._unpinned_bytes += self._items[checksum].header.nbytes
            self._items.move_to_end(checksum)  # its age counts from now
            self._used[checksum] = self.clock()
        self._evict()

    def discard(self, checksum: bytes) -> None:
        self._remove(checksum)

    def _remove(self, key: bytes) -> None:
        prepared = self._items.pop(key, None)
        self._used.pop(key, None)
        if prepared is not None and key not in self._pinned:
            self._unpinned_bytes -= prepared.header.nbytes
        self._pinned.discard(key)

    def _evict(self) -> None:
        """Unpinned tensors, least recently used first, while over the bytes or too old (the
        order is by last use, so the walk stops at the first one young enough)."""
        stale = self.clock() - self.max_age
        for key in list(self._items):
            if self._unpinned_bytes <= self.max_bytes and self._used[key] >= stale:
                break
            if key not in self._pinned:
                self._remove(key)

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
