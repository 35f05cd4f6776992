"""Iterative, parallel Kademlia lookups with early termination.

A lookup keeps the candidates it has heard of sorted by distance to the target and keeps
`alpha` queries in flight to the nearest ones not yet asked. Each answer adds the peers it
names. It ends when the `width` nearest candidates that did not fail have all answered, or as
soon as `done(nearest_open)` says the caller has what it wanted; `nearest_open` is the
distance of the nearest candidate that has not answered yet (None if there is none), so a
caller can stop once an answer came from nearer than anyone still pending. Queries still in
flight are then cancelled.

The query function is the caller's: it sends FindNode, FindValue or Store, records whatever
else the answer carried, and returns the peers it named. A query that raises counts as failed
and is not retried within this lookup.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import trio
from libp2p.peer.id import ID

from .keyspace import peer_key

log = logging.getLogger(__name__)

Query = Callable[[ID], Awaitable[Iterable[ID]]]

_NEW, _ASKED, _ANSWERED, _FAILED = range(4)


@dataclass(kw_only=True, slots=True)
class LookupResult:
    closest: list[ID]  # answered peers, nearest first, at most `width`
    queried: int = 0
    failed: int = 0
    stopped_early: bool = False
    failures: list[ID] = field(default_factory=list)


class _Candidates:
    """The peers a lookup heard of, sorted by distance to the target, each with its state."""

    def __init__(self, target: int, own: ID, max_candidates: int) -> None:
        self.target = target
        self.own = own
        self.max_candidates = max_candidates
        self.order: list[tuple[int, bytes]] = []  # (distance, peer bytes), sorted
        self.peers: dict[bytes, ID] = {}
        self.state: dict[bytes, int] = {}

    def consider(self, peer: ID) -> None:
        raw = peer.to_bytes()
        if peer == self.own or raw in self.state:
            return
        entry = (peer_key(peer) ^ self.target, raw)
        if len(self.order) >= self.max_candidates and entry >= self.order[-1]:
            return
        bisect.insort(self.order, entry)
        self.peers[raw], self.state[raw] = peer, _NEW
        if len(self.order) > self.max_candidates:
            _, dropped = self.order.pop()
            if self.state[dropped] == _NEW:  # never drop one we asked: its answer is still due
                del self.state[dropped], self.peers[dropped]

    def next_to_ask(self, width: int) -> list[bytes]:
        """Unasked peers among the `width` nearest that have not failed."""
        picked, live = [], 0
        for _, raw in self.order:
            if self.state.get(raw, _FAILED) == _FAILED:
                continue
            live += 1
            if live > width:
                break
            if self.state[raw] == _NEW:
                picked.append(raw)
        return picked

    def nearest_open(self) -> int | None:
        for distance, raw in self.order:
            if self.state.get(raw) in (_NEW, _ASKED):
                return distance
        return None

    def answered(self, width: int) -> list[ID]:
        return [self.peers[raw] for _, raw in self.order if self.state.get(raw) == _ANSWERED][
            :width
        ]


async def iterative_lookup(
    target: int,
    seeds: Iterable[ID],
    query: Query,
    *,
    own: ID,
    width: int,
    alpha: int,
    done: Callable[[int | None], bool] = lambda _nearest_open: False,
    max_candidates: int = 256,
) -> LookupResult:
    candidates = _Candidates(target, own, max_candidates)
    result = LookupResult(closest=[])
    for seed in seeds:
        candidates.consider(seed)
    if done(candidates.nearest_open()):
        result.stopped_early = True
        return result
    send, receive = trio.open_memory_channel[tuple[bytes, list[ID] | None]](alpha)

    async def ask(raw: bytes) -> None:
        peer = candidates.peers[raw]
        try:
            named: list[ID] | None = list(await query(peer))
        except (Exception, trio.TooSlowError) as exc:  # noqa: BLE001 - a peer that fails to answer is routine in a walk; the walk asks the next one
            log.debug("lookup query to %s failed: %s", peer, exc)
            named = None
        await send.send((raw, named))

    in_flight = 0
    async with trio.open_nursery() as nursery:
        while True:
            for raw in candidates.next_to_ask(width)[: alpha - in_flight]:
                candidates.state[raw] = _ASKED
                in_flight += 1
                result.queried += 1
                nursery.start_soon(ask, raw)
            if not in_flight:
                break
            raw, named = await receive.receive()
            in_flight -= 1
            _record_answer(candidates, result, raw, named)
            if done(candidates.nearest_open()):
                result.stopped_early = True
                break
        nursery.cancel_scope.cancel()
    result.closest = candidates.answered(width)
    return result


def _record_answer(
    candidates: _Candidates, result: LookupResult, raw: bytes, named: list[ID] | None
) -> None:
    """A query came back: `named` lists the peers it named, None if it failed."""
    if named is None:
        candidates.state[raw] = _FAILED
        result.failed += 1
        result.failures.append(candidates.peers[raw])
        return
    candidates.state[raw] = _ANSWERED
    for peer in named:
        candidates.consider(peer)
