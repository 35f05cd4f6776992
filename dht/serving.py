"""Answering DHT requests: what a server tells and what it agrees to keep.

Handlers are synchronous and bounded: a request names at most 16 entries, each validated
before anything is stored (`records.check_entry`), and an answer names at most `count` peers.
A rejected entry costs its sender the reason's penalty and is reported back in `Stored`, so an
honest sender with a wrong clock learns why. Queries for unknown namespaces are answered with
peers and no entries, without penalty: a newer node may know namespaces we do not.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from libp2p.peer.id import ID
from peertrain.protocol.messages import Request, Response

from .errors import RecordRejected
from .keyspace import key_from_bytes, peer_key, record_key
from .messages import (
    MAX_ENTRIES_PER_VALUE,
    MAX_VALUE_ANSWER,
    FindNode,
    FindValue,
    Nodes,
    PeerAddrs,
    Ping,
    Pong,
    Store,
    Stored,
    Value,
)
from .namespaces import NamespaceRegistry
from .peers import PeerBook
from .records import SignatureCache, SignedEntry, check_entry, now_ms
from .routing import RoutingTable
from .storage import RecordStore

log = logging.getLogger(__name__)


class Responder:
    def __init__(
        self,
        *,
        is_server: bool,
        table: RoutingTable,
        store: RecordStore,
        registry: NamespaceRegistry,
        signatures: SignatureCache,
        book: PeerBook,
        connected_keys: dict[int, ID],
        on_server_peer: Callable[[ID], None],
        on_client_peer: Callable[[ID], None],
        on_reject: Callable[[ID, RecordRejected], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.is_server = is_server
        self.table, self.store, self.registry = table, store, registry
        self.signatures, self.book = signatures, book
        self.connected_keys = connected_keys
        self.on_server_peer, self.on_client_peer, self.on_reject = (
            on_server_peer,
            on_client_peer,
            on_reject,
        )
        self.clock = clock
        self.answered = 0
        self._rng = random.Random()

    def __call__(self, peer: ID, request: Request) -> Response:
        self.answered += 1
        if getattr(request, "server", False):
            self.on_server_peer(peer)
        else:
            self.on_client_peer(peer)
        if isinstance(request, Ping):
            return request.reply(Pong, server=self.is_server)
        if isinstance(request, FindNode):
            return request.reply(
                Nodes,
                peers=self.closest(key_from_bytes_or_zero(request.target), request.count, peer),
            )
        if isinstance(request, FindValue):
            return self._find_value(peer, request)
        assert isinstance(request, Store)
        return self._store(peer, request)

    def closest(self, target: int, count: int, requester: ID) -> tuple[PeerAddrs, ...]:
        """The peers we know nearest `target`; a connected peer whose key *is* the target first.

        The exact match makes resolving a peer ID cheap when any neighbour holds a connection
        to that peer, even a client-mode peer that no routing table lists.
        """
        peers = self.table.closest(target, count, exclude=requester)
        exact = self.connected_keys.get(target)
        if exact is not None and exact != requester:
            peers = [exact, *(p for p in peers if p != exact)][:count]
        return self.book.describe_all(peers)

    def _find_value(self, peer: ID, request: FindValue) -> Value:
        entries = self.answer(request.key)
        target = record_key(request.key)
        return request.reply(
            Value, entries=tuple(entries), peers=self.closest(target, request.count, peer)
        )

    def answer(self, key: str) -> list[SignedEntry]:
        """The entries a FindValue for `key` gets, within the answer's byte and entry budget.

        Half the budget goes to the writers this server has held longest (`RecordStore.ranked`),
        the rest to a random sample of the others: a writer's own stamps earn nothing, so a
        flood of fresh, future-stamped or 4 KB entries cannot push a long-held listing out of
        an answer (newest-first under the budget let ~125 such entries hide every honest one),
        and newcomers are still seen."""
        ranked = self.store.ranked(key, now=now_ms(self.clock))
        taken: list[SignedEntry] = []
        used = 0
        for entry in ranked:  # the senior share: half the bytes and entries
            cost = entry.size + 64
            if used + cost > MAX_VALUE_ANSWER // 2 or len(taken) >= MAX_ENTRIES_PER_VALUE // 2:
                break
            used += cost
            taken.append(entry)
        rest = ranked[len(taken) :]
        self._rng.shuffle(rest)
        for entry in rest:  # the rest, at random
            cost = entry.size + 64
            if len(taken) >= MAX_ENTRIES_PER_VALUE:
                break
            if used + cost <= MAX_VALUE_ANSWER:
                used += cost
                taken.append(entry)
        return taken

    def _store(self, peer: ID, request: Store) -> Stored:
        now = now_ms(self.clock)
        held, reasons = 0, []
        worst: RecordRejected | None = None  # one penalty per request, for the worst entry
        for entry in request.entries:
            try:
                namespace, _value = check_entry(entry, self.registry, self.signatures, now=now)
            except RecordRejected as exc:
                if worst is None or exc.reason.penalty > worst.reason.penalty:
                    worst = exc
                reasons.append(str(exc)[:160])
                continue
            if not self.is_server:
                continue
            relayed = entry.writer != peer.to_bytes()  # a writer sends its own (values.py)
            held += self.store.put(entry, namespace, now=now, relayed=relayed) or self.store.holds(
                entry
            )
        if worst is not None:
            self.on_reject(peer, worst)
        target = record_key(request.entries[0].key) if request.entries else peer_key(peer)
        return request.reply(
            Stored,
            accepted=held,
            rejected=tuple(reasons),
            peers=self.closest(target, request.count, peer),
        )


def key_from_bytes_or_zero(raw: bytes) -> int:
    """A FindNode target; a short one (a peer's mistake, not an attack) reads as zero-padded."""
    return key_from_bytes(raw.rjust(32, b"\0"))
