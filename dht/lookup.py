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
    order: list[tuple[int, bytes]] = []  # (distance, peer bytes), sorted
    peers: dict[bytes, ID] = {}
    state: dict[bytes, int] = {}
    result = LookupResult(closest=[])

    def consider(peer: ID) -> None:
        raw = peer.to_bytes()
        if peer == own or raw in state:
            return
        entry = (peer_key(peer) ^ target, raw)
        if len(order) >= max_candidates and entry >= order[-1]:
            return
        bisect.insort(order, entry)
        peers[raw], state[raw] = peer, _NEW
        if len(order) > max_candidates:
            _, dropped = order.pop()
            if state[dropped] == _NEW:  # never drop one we asked: its answer is still due
                del state[dropped], peers[dropped]

    def next_to_ask() -> list[bytes]:
        picked, live = [], 0
        for _, raw in order:
            if state.get(raw, _FAILED) == _FAILED:
                continue
            live += 1
            if live > width:
                break
            if state[raw] == _NEW:
                picked.append(raw)
        return picked

    def nearest_open() -> int | None:
        for distance, raw in order:
            if state.get(raw) in (_NEW, _ASKED):
                return distance
        return None

    for seed in seeds:
        consider(seed)
    if done(nearest_open()):
        result.stopped_early = True
        return result
    send, receive = trio.open_memory_channel[tuple[bytes, list[ID] | None]](alpha)

    async def ask(raw: bytes) -> None:
        try:
            named: list[ID] | None = list(await query(peers[raw]))
        except (Exception, trio.TooSlowError) as exc:  # noqa: BLE001 - a peer that fails to answer is routine in a walk; the walk asks the next one
            log.debug("lookup query to %s failed: %s", peers[raw], exc)
            named = None
        await send.send((raw, named))

    in_flight = 0
    async with trio.open_nursery() as nursery:
        while True:
            for raw in next_to_ask()[: alpha - in_flight]:
                state[raw] = _ASKED
                in_flight += 1
                result.queried += 1
                nursery.start_soon(ask, raw)
            if not in_flight:
                break
            raw, named = await receive.receive()
            in_flight -= 1
            if named is None:
                state[raw] = _FAILED
                result.failed += 1
                result.failures.append(peers[raw])
            else:
                state[raw] = _ANSWERED
                for peer in named:
                    consider(peer)
            if done(nearest_open()):
                result.stopped_early = True
                break
        nursery.cancel_scope.cancel()
    result.closest = [peers[raw] for _, raw in order if state.get(raw) == _ANSWERED][:width]
    return result
