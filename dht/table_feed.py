"""Who joins the routing table: DHT servers we are connected to, and nobody who says otherwise.

A peer joins when it tells us it serves (its own request, a Pong) or when identify lists our
protocol for it (`inferred`); a peer that says it is a client leaves and stays out, even if an
older identify answer still lists our protocol. Kept apart from the node so the connection
watcher and the responder feed the table through this one door, without holding the node.
"""

from __future__ import annotations

from collections import OrderedDict

import trio
from libp2p.peer.id import ID

from .peers import PeerBook
from .routing import RoutingTable

MAX_CLIENTS_REMEMBERED = 4096


class TableFeed:
    def __init__(self, table: RoutingTable, book: PeerBook) -> None:
        self.table = table
        self.book = book
        self._grew = trio.Event()
        self._clients: OrderedDict[ID, None] = OrderedDict()  # peers that said they are clients

    def add_server(self, peer: ID, *, inferred: bool = False) -> None:
        """`inferred`: from identify's protocol list, which may predate the peer's own word
        (a request or Ping saying it is a client now, `said_client`); that word wins."""
        if inferred and peer in self._clients:
            return
        self._clients.pop(peer, None)
        if self.book.is_connected(peer) and self.table.add(peer):
            self._grew.set()

    def said_client(self, peer: ID) -> None:
        self.table.remove(peer)
        self._clients[peer] = None
        self._clients.move_to_end(peer)
        while len(self._clients) > MAX_CLIENTS_REMEMBERED:
            self._clients.popitem(last=False)

    async def wait_for_growth(self) -> None:
        """Return when a server joined the table since the last return (or joins from now)."""
        await self._grew.wait()
        self._grew = trio.Event()
