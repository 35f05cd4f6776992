"""`SimHost`: the part of libp2p's `IHost` that the DHT uses, over the simulated Internet (sim_net).

The DHT (dht/) is written against a libp2p host: it dials, opens streams, registers a stream
handler, watches connections and reads identify's protocol list from the peerstore. A `SimHost`
gives it exactly that, with costs in simulated time instead of sockets: a dial takes two round
trips (TCP, then Noise XX with the muxer negotiated inside it), a new stream one (multistream
select), identify's answer arrives one round trip after the connection. Streams carry the bytes
the DHT writes (its own framing and msgpack, unchanged) through `SimNet.transmit`.

A crashed host (`SimNet` churn) answers nothing: its peers' requests time out, dials to it fail
after `DIAL_TIMEOUT`, and its connections are seen closed `CRASH_NOTICED` seconds later
(a keepalive or a failed write). Several thousand hosts fit in memory: no keys beyond the
identity, no tasks of their own, a connection is two small objects.
"""

from __future__ import annotations

import collections
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PeerStoreError
from multiaddr import Multiaddr
from peertrain.dht.messages import RESPONSE_TYPES
from peertrain.protocol.messages import ErrorResponse, decode

from .sim_links import Access, rtt_between
from .sim_net import TRACE, LookupTrace, SimNet

DIAL_TIMEOUT = 5.0
CRASH_NOTICED = 10.0
HANDSHAKE_RTTS = 2.0
HANDSHAKE_BYTES = (80, 160, 1200, 1200)  # SYN/ACK, Noise XX's three messages with certificates
BASE_PROTOCOLS = ("/ipfs/id/1.0.0", "/ipfs/ping/1.0.0")

Handler = Callable[[Any], Awaitable[None]]


class SimConn:
    """One side of a connection (`INetConn` and its `muxed_conn`: `peer_id` is the remote)."""

    __slots__ = ("local", "remote", "peer_id", "rtt", "identified_at", "streams", "closed")

    def __init__(self, local: SimHost, remote: SimHost, rtt: float, now: float) -> None:
        self.local, self.remote, self.peer_id, self.rtt = local, remote, remote.get_id(), rtt
        self.identified_at = now + rtt
        self.streams: list[SimStream] = []
        self.closed = False

    @property
    def muxed_conn(self) -> SimConn:
        return self


class SimStream:
    """One end of a stream: `read(n)`, `write(data)`, `close()`, `reset()`, `muxed_conn`."""

    __slots__ = ("conn", "partner", "initiator", "pending", "_buf", "_ready", "_eof", "_reset")
    __slots__ += ("_write_closed", "fifo")

    def __init__(self, conn: SimConn, *, initiator: bool) -> None:
        self.conn, self.initiator = conn, initiator
        self.partner: SimStream | None = None
        # the traces of our requests still unanswered, in order (None: an untraced request)
        self.pending: collections.deque[LookupTrace | None] = collections.deque()
        self._buf = bytearray()
        self._ready = trio.Event()
        self._eof = self._reset = self._write_closed = False
        self.fifo = 0.0  # arrival of the last byte sent: later bytes arrive after it (TCP)

    @property
    def muxed_conn(self) -> SimConn:
        return self.conn

    async def read(self, n: int | None = None) -> bytes:
        while not self._buf:
            if self._reset:
                raise trio.BrokenResourceError("stream reset")
            if self._eof:
                return b""
            self._ready = trio.Event()
            await self._ready.wait()
        n = len(self._buf) if n is None else min(n, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def write(self, data: bytes) -> None:
        if self._reset or self._write_closed or self.conn.closed:
            raise trio.ClosedResourceError("stream closed")
        # No checkpoint: the bytes are queued, and the writer's next wait lets others run.
        self.conn.local.net.send(self, bytes(data))

    async def close(self) -> None:
        if not self._write_closed and not self._reset and self.partner is not None:
            self._write_closed = True
            self.conn.local.net.at(max(self.fifo, trio.current_time()), self.partner._end)
        await trio.lowlevel.checkpoint()

    async def reset(self) -> None:
        self.fail()
        if self.partner is not None:
            self.partner.fail()
        await trio.lowlevel.checkpoint()

    def fail(self) -> None:
        self._reset = True
        self._ready.set()

    def _end(self) -> None:
        self._eof = True
        self._ready.set()

    def arrive(self, data: bytes, trace: LookupTrace | None) -> None:
        if self._reset or not self.conn.local.alive:
            return
        self._buf += data
        self._ready.set()
        if trace is not None:
            trace.answered(self.conn.peer_id.to_bytes(), _named_peers(data))


def _named_peers(frame: bytes) -> list[bytes]:
    """The peers a DHT answer names (a traced lookup's hop count needs them)."""
    reply = decode(frame[4:], (*RESPONSE_TYPES, ErrorResponse))
    return [p.peer_id for p in getattr(reply, "peers", ())]


class SimHostNet(SimNet):
    """`SimNet` plus the hosts on it: dials, streams, crashes."""

    def __init__(self, *, seed: int = 0, loss: bool = True) -> None:
        super().__init__(seed=seed, loss=loss)
        self.hosts: dict[ID, SimHost] = {}
        self.nursery: trio.Nursery | None = None  # set by `serve`

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await nursery.start(self.run)
            task_status.started()

    def add(self, index: int, key_pair: KeyPair, access: Access) -> SimHost:
        host = SimHost(self, index, key_pair, access)
        self.hosts[host.get_id()] = host
        return host

    def send(self, stream: SimStream, data: bytes) -> None:
        conn, partner = stream.conn, stream.partner
        assert partner is not None
        local, remote = conn.local, conn.remote
        arrive = self.transmit(local.index, local.access, remote.access, conn.rtt, len(data))
        arrive = stream.fifo = max(arrive, stream.fifo)
        trace = None
        if stream.initiator:  # a request: the answer to it, in order, goes to the same trace
            request_trace = TRACE.get()
            if request_trace is not None:
                request_trace.sent(len(data))
            stream.pending.append(request_trace)
        elif partner.pending:
            trace = partner.pending.popleft()
        if remote.alive:
            self.at(arrive, partner.arrive, data, trace)

    def link(self, a: SimHost, b: SimHost, rtt: float) -> SimConn:
        now = trio.current_time()
        mine, theirs = SimConn(a, b, rtt, now), SimConn(b, a, rtt, now)
        a.conns[b.get_id()], b.conns[a.get_id()] = mine, theirs
        a.known.add(b.get_id())
        b.known.add(a.get_id())
        for host, conn in ((a, mine), (b, theirs)):
            for notifee in host.notifees:
                self.nursery.start_soon(notifee.connected, host.network, conn)
        return mine

    def crash(self, host: SimHost) -> None:
        """`host` stops at once; its peers notice its connections closed a while later."""
        host.alive = False
        host.scope.cancel()
        self.at(trio.current_time() + CRASH_NOTICED, self._close_all, host)

    def _close_all(self, host: SimHost) -> None:
        for peer, conn in list(host.conns.items()):
            other = conn.remote
            back = other.conns.pop(host.get_id(), None)
            for side in (conn, back):
                if side is not None:
                    side.closed = True
                    for stream in side.streams:
                        stream.fail()
            if back is not None and other.alive:
                for notifee in other.notifees:
                    self.nursery.start_soon(notifee.disconnected, other.network, back)
            del host.conns[peer]


class SimHost:
    """What the DHT calls on its host (see the module docstring); `run` it in a nursery."""

    def __init__(self, net: SimHostNet, index: int, key_pair: KeyPair, access: Access) -> None:
        self.net, self.index, self.access = net, index, access
        self._key_pair = key_pair
        self._id = ID.from_pubkey(key_pair.public_key)
        self.addr = Multiaddr(
            f"/ip4/10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}/tcp/4001"
        )
        self.conns: dict[ID, SimConn] = {}
        self.handlers: dict[str, Handler] = {}
        self.notifees: list[Any] = []
        self.known: set[ID] = set()  # peers whose address the peerstore holds
        self.alive = True
        self.scope = trio.CancelScope()
        self.nursery: trio.Nursery | None = None
        self.network = _Network(self)
        self._peerstore = _Peerstore(self)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                task_status.started()
                await trio.sleep_forever()

    # identity and addresses
    def get_id(self) -> ID:
        return self._id

    def get_public_key(self) -> Any:
        return self._key_pair.public_key

    def get_private_key(self) -> Any:
        return self._key_pair.private_key

    def get_addrs(self) -> list[Multiaddr]:
        return [self.addr]

    def get_network(self) -> _Network:
        return self.network

    def get_peerstore(self) -> _Peerstore:
        return self._peerstore

    def get_connected_peers(self) -> list[ID]:
        return list(self.conns)

    def info(self) -> PeerInfo:
        return PeerInfo(self._id, [self.addr])

    # protocols and streams
    def set_stream_handler(self, protocol: str, handler: Handler) -> None:
        self.handlers[str(protocol)] = handler

    def remove_stream_handler(self, protocol: str) -> None:
        self.handlers.pop(str(protocol), None)

    async def connect(self, info: PeerInfo) -> None:
        peer = info.peer_id
        if peer in self.conns:
            return
        other = self.net.hosts.get(peer)
        if other is None or not other.alive:
            await trio.sleep(DIAL_TIMEOUT)
            raise ConnectionError(f"dial to {peer} timed out")
        rtt = rtt_between(self.access, other.access)
        for i, nbytes in enumerate(HANDSHAKE_BYTES):
            sender = self if i % 2 == 0 else other
            self.net.count(sender.index, nbytes)
        await trio.sleep(HANDSHAKE_RTTS * rtt)
        if not other.alive:
            await trio.sleep(DIAL_TIMEOUT)
            raise ConnectionError(f"dial to {peer} timed out")
        if peer not in self.conns:
            self.net.link(self, other, rtt)

    async def new_stream(self, peer: ID, protocols: Sequence[str]) -> SimStream:
        conn = self.conns.get(peer)
        if conn is None:
            raise ConnectionError(f"not connected to {peer}")
        other = conn.remote
        self.net.count(self.index, 60)  # multistream-select: the protocol and its echo
        self.net.count(other.index, 60)
        await trio.sleep(conn.rtt)
        handler = other.handlers.get(str(protocols[0]))
        if conn.closed or not other.alive or other.nursery is None:
            await trio.sleep(DIAL_TIMEOUT)
            raise ConnectionError(f"stream to {peer} timed out")
        if handler is None:
            raise ConnectionError(f"{peer} does not speak {protocols[0]}")
        back = other.conns[self._id]
        mine, theirs = SimStream(conn, initiator=True), SimStream(back, initiator=False)
        mine.partner, theirs.partner = theirs, mine
        conn.streams.append(mine)
        back.streams.append(theirs)
        # the handler runs as the remote's task, outside whatever lookup opened the stream
        contextvars.Context().run(other.nursery.start_soon, handler, theirs)
        return mine


class _Network:
    def __init__(self, host: SimHost) -> None:
        self.host = host

    def register_notifee(self, notifee: Any) -> None:
        self.host.notifees.append(notifee)

    def remove_notifee(self, notifee: Any) -> None:
        if notifee in self.host.notifees:
            self.host.notifees.remove(notifee)

    def get_connections(self, peer: ID) -> list[SimConn]:
        conn = self.host.conns.get(peer)
        return [conn] if conn is not None else []

    async def dial_addr(self, addr: Multiaddr, peer: ID) -> SimConn:
        """Dial `peer` (at its one simulated address, whichever `addr` says)."""
        await self.host.connect(PeerInfo(peer, [addr]))
        return self.host.conns[peer]


class _Peerstore:
    def __init__(self, host: SimHost) -> None:
        self.host = host

    def add_addrs(self, peer: ID, addrs: Sequence[Multiaddr], ttl: float) -> None:
        if peer in self.host.net.hosts:
            self.host.known.add(peer)

    def addrs(self, peer: ID) -> list[Multiaddr]:
        if peer not in self.host.known:
            raise PeerStoreError(f"no addresses for {peer}")
        return [self.host.net.hosts[peer].addr]

    def get_protocols(self, peer: ID) -> list[str]:
        conn = self.host.conns.get(peer)
        if conn is None or trio.current_time() < conn.identified_at:
            raise PeerStoreError(f"{peer} not identified")
        return [*BASE_PROTOCOLS, *conn.remote.handlers]
