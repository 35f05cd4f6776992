"""This node's way of asking the DHT: one request to a peer, and lookups seeded from our table.

`lookup.py` holds the walk itself and knows nothing of a node; this binds it to one node's
links, routing table and peer book, so that every walk (a put, a get, a peer search, a refresh)
teaches the table the same things:
- a peer that answers a DHT request serves the DHT, so it joins the table;
- peers an answer names are learned (addresses into the peer book, contacts into the table);
- peers that failed during a lookup leave the table.

The query functions that puts, gets and peer searches hand to `lookup` are theirs
(`values.py`, `resolution.py`); they build their requests with `is_server`, the node's
current mode, which `Dht.set_mode` may change between two requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from libp2p.peer.id import ID
from peertrain.protocol.messages import Request, Response

from .channels import Links
from .config import DhtConfig
from .keyspace import peer_key
from .lookup import LookupResult, Query, iterative_lookup
from .messages import FindNode, Nodes, PeerAddrs
from .peers import PeerBook
from .routing import RoutingTable

Done = Callable[[int | None], bool]
Reply = TypeVar("Reply", bound=Response)


class Walker:
    """Requests and lookups on behalf of one node; see the module docstring."""

    def __init__(
        self,
        *,
        own: ID,
        config: DhtConfig,
        links: Links,
        table: RoutingTable,
        book: PeerBook,
        is_server: Callable[[], bool],
        on_server_peer: Callable[[ID], None],
        counts: Counter[str],
    ) -> None:
        self.own, self.config = own, config
        self.links, self.table, self.book = links, table, book
        self._is_server = is_server
        self._on_server_peer = on_server_peer
        self._counts = counts  # shared with the node's statistics: "lookups"

    @property
    def is_server(self) -> bool:
        """The node's mode now, as our requests announce it."""
        return self._is_server()

    async def request(self, peer: ID, message: Request, expected: type[Reply]) -> Reply:
        """Ask `peer`; its answer, of type `expected`. Raises what `Links.request` raises."""
        reply = await self.links.request(
            peer, message, expected, timeout=self.config.request_timeout
        )
        self._on_server_peer(peer)  # it answered a DHT request: it serves
        return reply

    def heard(self, answer: Iterable[PeerAddrs], target: int) -> list[ID]:
        """Peers an answer named: candidates for this lookup, and learned contacts for the table
        (except a peer whose key is the target itself: it may be a client that a neighbour
        named because it holds a connection to it, see `Responder.closest`)."""
        peers = self.book.learn(answer, own=self.own)
        for peer in peers:
            if peer_key(peer) != target:
                self.table.learn(peer)
        return peers

    async def lookup(
        self,
        target: int,
        query: Query,
        *,
        width: int,
        alpha: int,
        done: Done = lambda _open: False,
        seeds: Sequence[ID] = (),
    ) -> LookupResult:
        """Walk toward `target` from `seeds` and the nearest peers in our table (`lookup.py`)."""
        self._counts["lookups"] += 1
        seeds = [*seeds, *self.table.closest(target, max(width, alpha))]
        result = await iterative_lookup(
            target, seeds, query, own=self.own, width=width, alpha=alpha, done=done
        )
        self.table.touch(target)
        for peer in result.failures:
            self.table.remove(peer)
        return result

    async def lookup_nodes(
        self,
        target: int,
        *,
        width: int | None = None,
        alpha: int | None = None,
        done: Done = lambda _open: False,
        seeds: Sequence[ID] = (),
    ) -> LookupResult:
        """A FindNode walk: the `width` (default: replicas) DHT servers nearest to `target`."""
        width = width or self.config.replicas
        alpha = alpha or self.config.alpha

        async def query(peer: ID) -> list[ID]:
            return await self.find_nodes(peer, target, count=max(width, 3))

        return await self.lookup(target, query, width=width, alpha=alpha, done=done, seeds=seeds)

    async def find_nodes(self, peer: ID, target: int, *, count: int) -> list[ID]:
        """One FindNode to `peer`: the servers it names nearest `target` (learned on the way)."""
        reply = await self.request(
            peer,
            FindNode(target=target.to_bytes(32, "big"), server=self.is_server, count=count),
            Nodes,
        )
        return self.heard(reply.peers, target)
