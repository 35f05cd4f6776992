"""The DHT's wire messages on `/peertrain/dht/1.0.0`.

Requests carry `server`: whether the sender serves the DHT. A server that hears from another
server adds it to its routing table on the spot (the connection proves it is alive and who it
is); a client-mode sender (behind NAT) is answered but never handed out to others.

    Ping       → Pong        liveness, and the probe for connected peers of unknown mode
    FindNode   → Nodes       the k peers the answerer knows closest to a 256-bit target
    FindValue  → Value       the entries the answerer holds for a key, and closer peers
    Store      → Stored      entries to keep, answered with what was taken and closer peers

`Store` also returns closer peers so that a put is a single iterative walk that stores at
every hop, instead of a lookup followed by a second round of stores.
"""

from __future__ import annotations

from typing import Annotated

from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Message, Request, Response, message
from peertrain.protocol.schema import IntRange, MaxLen

from .namespaces import MAX_KEY_LEN
from .records import MAX_ENTRY_SIZE, SignedEntry

DHT_PROTOCOL = protocol_id("dht", "1.0.0")
MAX_PEERS_PER_ANSWER = 32
MAX_ADDRS_PER_PEER = 8
MAX_ENTRIES_PER_STORE = 16
MAX_ENTRIES_PER_VALUE = 256
MAX_VALUE_ANSWER = 512 * 1024
_PEER_SIZE = 64 + MAX_ADDRS_PER_PEER * 260 + 64
_PEERS_SIZE = MAX_PEERS_PER_ANSWER * _PEER_SIZE

Target = Annotated[bytes, MaxLen(32)]
Count = Annotated[int, IntRange(1, MAX_PEERS_PER_ANSWER)]


@message("dht/peer", max_size=_PEER_SIZE)
class PeerAddrs(Message):
    peer_id: Annotated[bytes, MaxLen(64)]
    addrs: Annotated[tuple[Annotated[str, MaxLen(256)], ...], MaxLen(MAX_ADDRS_PER_PEER)]


@message("dht/ping", max_size=64)
class Ping(Request):
    server: bool


@message("dht/pong", max_size=64)
class Pong(Response):
    server: bool


@message("dht/find-node", max_size=128)
class FindNode(Request):
    target: Target
    server: bool
    count: Count = 20  # how many peers the asker wants named


@message("dht/nodes", max_size=_PEERS_SIZE + 64)
class Nodes(Response):
    peers: Annotated[tuple[PeerAddrs, ...], MaxLen(MAX_PEERS_PER_ANSWER)]


@message("dht/find-value", max_size=MAX_KEY_LEN + 64)
class FindValue(Request):
    key: Annotated[str, MaxLen(MAX_KEY_LEN)]
    server: bool
    count: Count = 20  # how many peers the asker wants named


@message("dht/value", max_size=MAX_VALUE_ANSWER + _PEERS_SIZE + 64)
class Value(Response):
    entries: Annotated[tuple[SignedEntry, ...], MaxLen(MAX_ENTRIES_PER_VALUE)]
    peers: Annotated[tuple[PeerAddrs, ...], MaxLen(MAX_PEERS_PER_ANSWER)]


@message("dht/store", max_size=MAX_ENTRIES_PER_STORE * (MAX_ENTRY_SIZE + 64) + 64)
class Store(Request):
    entries: Annotated[tuple[SignedEntry, ...], MaxLen(MAX_ENTRIES_PER_STORE)]
    server: bool
    count: Count = 20  # how many peers the asker wants named


@message("dht/stored", max_size=_PEERS_SIZE + MAX_ENTRIES_PER_STORE * 200 + 64)
class Stored(Response):
    accepted: Annotated[int, IntRange(0, MAX_ENTRIES_PER_STORE)]
    rejected: Annotated[tuple[Annotated[str, MaxLen(160)], ...], MaxLen(MAX_ENTRIES_PER_STORE)]
    peers: Annotated[tuple[PeerAddrs, ...], MaxLen(MAX_PEERS_PER_ANSWER)]


REQUEST_TYPES = (Ping, FindNode, FindValue, Store)
RESPONSE_TYPES = (Pong, Nodes, Value, Stored)
