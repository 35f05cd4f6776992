"""A DHT node: Kademlia on libp2p streams, with signed, expiring, namespaced records.

    dht = Dht(host, DhtConfig(), bootstrap=[peer_info], penalise=scoreboard.penalise)
    await nursery.start(dht.run)             # serves at once; bootstraps in the background
    await dht.wait_bootstrapped()            # optional: after the first self-lookup
    await dht.put(stage_key("run1", 3), {"tput": 812.0}, ttl=60)
    servers = await dht.get(stage_key("run1", 3))      # {writer peer ID: Record}
    info = await dht.resolve(peer_id)        # a bare peer ID → connected PeerInfo

What differs from py-libp2p's KadDHT, and why (LIBP2P-NOTES.md):
- every connected DHT server joins the routing table (identify, a Ping, or its own request
  says it serves), and leaves it when it disconnects, so a node is useful as soon as it holds
  one connection instead of after a 120 s refresh;
- the first peer in the table triggers a self-lookup right away (bootstrap in milliseconds);
- requests reuse one long-lived stream per peer (`channels.py`): ≈1 ms instead of ≈12 ms;
- a put stores at every hop of its lookup (`Store` answers name closer peers);
- a get stops at the first replica that holds the key (`quorum`), at the second for keys that
  many peers write to;
- only registered namespaces are accepted, and every entry is signed by its writer and expires.

Client mode (for nodes others cannot dial) registers no handler: it is never in anyone's
table, stores nothing for others, and still looks up, puts and gets. `set_mode` switches
between the two while running (the node's reachability verdict decides).
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from peertrain.protocol.errors import PeertrainError, ProtocolError

from .announce import keep_announced
from .channels import Links, Server
from .errors import PeerNotFound, RecordRejected, RejectReason, StoreFailed
from .keyspace import peer_key, random_key_in_bucket, record_key
from .lookup import LookupResult, iterative_lookup
from .messages import (
    DHT_PROTOCOL,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    FindNode,
    FindValue,
    Nodes,
    Ping,
    Pong,
    Store,
    Stored,
    Value,
)
from .namespaces import MAX_PEER_ADDRS, NamespaceRegistry, default_registry, peer_record_key
from .peers import PeerBook
from .records import Record, SignatureCache, SignedEntry, check_entry, now_ms, sign_entry, to_record
from .routing import RoutingStatistics, RoutingTable
from .serving import Responder
from .storage import RecordStore, StoreStatistics
from .watcher import ConnectionWatcher

log = logging.getLogger(__name__)

Penalise = Callable[[str, float, str], Any]
BAD_ANSWER_PENALTY = 25.0
MAX_CLIENTS_REMEMBERED = 4096
FIRST_REFRESH = (5.0, 15.0)  # seconds after bootstrap: the wide self-lookup, spread out in time


class DhtMode(enum.Enum):
    SERVER = "server"
    CLIENT = "client"


@dataclass(frozen=True, kw_only=True, slots=True)
class DhtConfig:
    mode: DhtMode = DhtMode.SERVER
    bucket_size: int = 20  # k
    alpha: int = 3  # lookups in flight per get / find
    replicas: int = 8  # peers a put stores at; also the width of lookups
    request_timeout: float = 3.0
    refresh_interval: float = 60.0
    identify_wait: float = 10.0  # how long a new connection's identify may take to say it serves
    peer_record_ttl: float = 600.0
    publish_peer_record: bool = True
    max_records: int = 100_000
    max_record_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if not (1 <= self.alpha <= 32 and 1 <= self.replicas <= 32 and 1 <= self.bucket_size <= 64):
            raise ValueError("alpha and replicas must be 1..32, bucket_size 1..64")
        if self.request_timeout <= 0 or self.refresh_interval <= 0 or self.peer_record_ttl <= 0:
            raise ValueError("timeouts, intervals and ttls must be positive")


DEFAULT_CONFIG = DhtConfig()


@dataclass(frozen=True, slots=True)
class Found:
    """A resolved peer: where to dial it, and how we learned it (connected, record, lookup)."""

    info: PeerInfo
    how: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DhtStatistics:
    mode: str
    bootstrapped: bool
    routing: RoutingStatistics
    storage: StoreStatistics
    links: int
    lookups: int
    puts: int
    gets: int
    answered: int
    resolved: int
    rejected: dict[str, int]


class Dht:
    """One node of the DHT on `host`; `run` it in a nursery."""

    def __init__(
        self,
        host: IHost,
        config: DhtConfig = DEFAULT_CONFIG,
        *,
        bootstrap: Sequence[PeerInfo] = (),
        registry: NamespaceRegistry | None = None,
        penalise: Penalise | None = None,
        is_banned: Callable[[str], bool] = lambda _peer: False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.config = config
        self.own = host.get_id()
        self.bootstrap_peers = [p for p in bootstrap if p.peer_id != self.own]
        self.registry = registry or default_registry()
        self.is_server = config.mode is DhtMode.SERVER
        self._penalise = penalise
        self._is_banned = is_banned
        self.clock = clock
        self._key_pair = KeyPair(host.get_private_key(), host.get_public_key())
        self.table = RoutingTable(self.own, bucket_size=config.bucket_size)
        self.store = RecordStore(max_entries=config.max_records, max_bytes=config.max_record_bytes)
        self.signatures = SignatureCache()
        self.book = PeerBook(host)
        self.connected_keys: dict[int, ID] = {}
        self.extra_addrs: list[str] = []  # e.g. relay circuit addresses, for our peer record
        self.links = Links(
            host, DHT_PROTOCOL, RESPONSE_TYPES, on_bad_peer=self._bad_peer, connect=self._dial
        )
        self.responder = Responder(
            is_server=self.is_server,
            table=self.table,
            store=self.store,
            registry=self.registry,
            signatures=self.signatures,
            book=self.book,
            connected_keys=self.connected_keys,
            on_server_peer=self._add_server,
            on_client_peer=self._said_client,
            on_reject=self._bad_peer,
            clock=clock,
        )
        self.server = Server(
            host,
            DHT_PROTOCOL,
            REQUEST_TYPES,
            self.responder,
            on_bad_peer=self._bad_peer,
            is_banned=is_banned,
        )
        self.watcher = ConnectionWatcher(self)
        self._table_grew = trio.Event()
        self._bootstrap_lock = trio.Lock()
        self._bootstrapped = trio.Event()
        self._counts: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()
        self._running = False
        self._clients: OrderedDict[ID, None] = OrderedDict()  # peers that said they are clients

    # ── lifecycle ────────────────────────────────────────────────────────────────────────

    async def run(self, *, task_status: trio.TaskStatus[Dht] = trio.TASK_STATUS_IGNORED) -> None:
        network = self.host.get_network()
        network.register_notifee(self.watcher)
        if self.is_server:
            self.server.register()
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                self.links.attach(nursery)
                await nursery.start(self.watcher.run)
                nursery.start_soon(self._maintain)
                nursery.start_soon(self._housekeeping)
                if self.config.publish_peer_record:
                    nursery.start_soon(self._publish_peer_record)
                task_status.started(self)
        finally:
            self._running = False
            network.remove_notifee(self.watcher)
            if self.server.serving:
                self.server.unregister()

    @property
    def mode(self) -> DhtMode:
        return DhtMode.SERVER if self.is_server else DhtMode.CLIENT

    async def set_mode(self, mode: DhtMode) -> None:
        """Serve the DHT, or stop serving it, while running: e.g. once a reachability check
        says whether others can dial this node (a server they cannot dial costs every lookup
        that reaches it a request timeout).

        A client answers nothing, so it stores nothing new; records it already holds expire
        unused (a put stores at several replicas). Connected peers hear of the change at once,
        by a Ping carrying the new mode (each server adds or drops us) and an identify push
        (their peerstores list our protocols); anyone else by our next request, or by a
        request of theirs that we no longer answer.
        """
        server = mode is DhtMode.SERVER
        if server == self.is_server:
            return
        self.is_server = self.responder.is_server = server
        if server and self._running:
            self.server.register()
        elif not server:
            self.server.unregister()
        log.info("dht: now in %s mode", mode.value)
        with trio.move_on_after(self.config.request_timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._push_identify)
                for peer in self.host.get_connected_peers():  # ours in their table or not
                    nursery.start_soon(self.probe, peer)

    async def _push_identify(self) -> None:
        """Tell connected peers our protocols changed: a peer that connects to us again would
        otherwise read the old list (with or without ours) from its peerstore."""
        from libp2p.identity.identify_push.identify_push import push_identify_to_peers

        try:
            await push_identify_to_peers(self.host)
        except Exception as exc:  # best effort: requests tell them too
            log.debug("dht: identify push after a mode change: %s", exc)

    async def wait_bootstrapped(self) -> None:
        """Wait for the first self-lookup: from then on this node finds and is found."""
        await self._bootstrapped.wait()

    @property
    def bootstrapped(self) -> bool:
        return self._bootstrapped.is_set()

    async def bootstrap(self, peers: Sequence[PeerInfo] = ()) -> int:
        """Connect to `peers` (and the configured ones), then look ourselves up.

        The self-lookup is one peer wide: the bootstrap peer names the peers nearest to us and
        we walk to the nearest, which then knows us. That makes us useful at once (lookups
        work through any peer in the table) for about two connections. A wider walk follows a
        moment later in the background (`_maintain`): in py-libp2p a connection costs ≈17 ms
        of CPU (two thirds of it identify), and a swarm joining all at once with the wide walk
        up front spent three times as long before anyone was usable. Returns the routing
        table's size. Safe to call again at any time.
        """
        known = {p.peer_id for p in self.bootstrap_peers}
        self.bootstrap_peers += [
            p for p in peers if p.peer_id not in known and p.peer_id != self.own
        ]
        async with self._bootstrap_lock:
            reached = await self._connect_all(self.bootstrap_peers)
            seeds = [*reached, *self.table.closest(self.table.own_key, self.config.alpha)]
            if seeds:
                await self._lookup_nodes(self.table.own_key, width=1, alpha=1, seeds=seeds)
            if len(self.table):
                self._bootstrapped.set()
            return len(self.table)

    async def _maintain(self) -> None:
        """Bootstrap as soon as there is anyone to bootstrap from, then refresh periodically."""
        delay = 1.0
        while not self._bootstrapped.is_set():
            if self.bootstrap_peers or len(self.table):
                async with self._bootstrap_lock:
                    pass  # a bootstrap someone else started finishes first
                if not self._bootstrapped.is_set():
                    await self.bootstrap()
                if self._bootstrapped.is_set():
                    break
            with trio.move_on_after(delay):
                await self._table_grew.wait()
            self._table_grew = trio.Event()
            delay = min(delay * 2, self.config.refresh_interval)
        await trio.sleep(random.uniform(*FIRST_REFRESH))
        await self._lookup_nodes(self.table.own_key, width=self.config.alpha)
        while True:
            await trio.sleep(self.config.refresh_interval * random.uniform(0.8, 1.2))
            await self.refresh()

    async def refresh(self) -> None:
        """Self-lookup plus a random lookup in up to 3 buckets no lookup went through lately."""
        if not len(self.table):
            await self._connect_all(self.bootstrap_peers)
        await self._lookup_nodes(self.table.own_key, width=self.config.alpha)
        stale = self.table.stale_buckets(self.config.refresh_interval)
        for index in random.sample(stale, min(3, len(stale))):
            await self._lookup_nodes(
                random_key_in_bucket(self.table.own_key, index, random.getrandbits(256))
            )

    async def _housekeeping(self) -> None:
        """Every second: drop expired records, and verified peers whose connection is gone.

        The disconnect notifee usually removes them at once, but py-libp2p does not notify
        every close (a duplicate connection's end, for one), and a peer we believe connected
        would be handed out to others as alive.
        """
        while True:
            self.store.purge_expired(now_ms(self.clock))
            for peer in self.table.verified_peers():
                if not self.book.is_connected(peer):
                    self.table.remove(peer)
                    await self.links.close_peer(peer)
            await trio.sleep(1.0)

    def peer_record(self) -> dict[str, list[str]]:
        """Our peer record's value: where we can be dialled.

        `extra_addrs` come first: addresses the host cannot advertise itself, such as relay
        circuit addresses (identify mangles those, LIBP2P-NOTES.md), set by whoever makes them.
        """
        own = [str(a) for a in self.host.get_addrs()]
        return {"addrs": list(dict.fromkeys([*self.extra_addrs, *own]))[:MAX_PEER_ADDRS]}

    async def publish_peer_record(self) -> int:
        """Put our peer record once; returns how many peers hold it."""
        return await self.put(
            peer_record_key(self.own), self.peer_record(), ttl=self.config.peer_record_ttl
        )

    async def _publish_peer_record(self) -> None:
        await self._bootstrapped.wait()
        await keep_announced(
            self, peer_record_key(self.own), self.peer_record, ttl=self.config.peer_record_ttl
        )

    # ── routing table feed ───────────────────────────────────────────────────────────────

    def _add_server(self, peer: ID, *, inferred: bool = False) -> None:
        """`inferred`: from identify's protocol list, which may predate the peer's own word
        (a request or Ping saying it is a client now, `_said_client`); that word wins."""
        if inferred and peer in self._clients:
            return
        self._clients.pop(peer, None)
        if self.book.is_connected(peer) and self.table.add(peer):
            self._table_grew.set()

    def _said_client(self, peer: ID) -> None:
        self.table.remove(peer)
        self._clients[peer] = None
        self._clients.move_to_end(peer)
        while len(self._clients) > MAX_CLIENTS_REMEMBERED:
            self._clients.popitem(last=False)

    async def _connect_all(self, peers: Sequence[PeerInfo]) -> list[ID]:
        """Connect to `peers` in parallel; return those that answered."""
        reached: list[ID] = []

        async def connect(info: PeerInfo) -> None:
            try:
                with trio.fail_after(self.config.request_timeout * 2):
                    await self.host.connect(info)
            except (Exception, trio.TooSlowError) as exc:
                log.info("dht: could not reach bootstrap peer %s: %s", info.peer_id, exc)
                return
            reached.append(info.peer_id)

        async with trio.open_nursery() as nursery:
            for info in peers:
                nursery.start_soon(connect, info)
        return reached

    async def probe(self, peer: ID) -> bool:
        """Ping `peer`; add it to the table if it serves the DHT. False if it failed or is a
        client."""
        try:
            pong = await self.links.request(
                peer, Ping(server=self.is_server), Pong, timeout=self.config.request_timeout
            )
        except (PeertrainError, trio.TooSlowError):
            return False
        if pong.server:
            self._add_server(peer)
        return pong.server

    async def _dial(self, peer: ID) -> None:
        await self.host.connect(PeerInfo(peer, self.book.dial_addrs(peer)))

    def _failed(self, peers: Sequence[ID]) -> None:
        for peer in peers:
            self.table.remove(peer)

    # ── penalties ────────────────────────────────────────────────────────────────────────

    def _bad_peer(self, peer: ID, exc: ProtocolError) -> None:
        points = exc.reason.penalty if isinstance(exc, RecordRejected) else BAD_ANSWER_PENALTY
        code = exc.reason.code if isinstance(exc, RecordRejected) else type(exc).__name__
        self._rejected[code] += 1
        log.warning("dht: rejected input from %s: %s", peer, exc)
        if self._penalise is not None:
            self._penalise(peer.to_base58(), points, f"dht: {exc}")

    # ── lookups ──────────────────────────────────────────────────────────────────────────

    async def _lookup(
        self,
        target: int,
        query,
        *,
        width: int,
        alpha: int,
        done=lambda _open: False,
        seeds: Sequence[ID] = (),
    ) -> LookupResult:
        self._counts["lookups"] += 1
        seeds = [*seeds, *self.table.closest(target, max(width, alpha))]
        result = await iterative_lookup(
            target, seeds, query, own=self.own, width=width, alpha=alpha, done=done
        )
        self.table.touch(target)
        self._failed(result.failures)
        return result

    def _heard(self, answer, target: int) -> list[ID]:
        """Peers an answer named: candidates for this lookup, and learned contacts for the table
        (except a peer whose key is the target itself: it may be a client that a neighbour
        named because it holds a connection to it, see `Responder.closest`)."""
        peers = self.book.learn(answer, own=self.own)
        for peer in peers:
            if peer_key(peer) != target:
                self.table.learn(peer)
        return peers

    async def _request(self, peer: ID, message, expected):
        reply = await self.links.request(
            peer, message, expected, timeout=self.config.request_timeout
        )
        self._add_server(peer)  # it answered a DHT request: it serves
        return reply

    async def _lookup_nodes(
        self,
        target: int,
        *,
        width: int | None = None,
        alpha: int | None = None,
        done=lambda _open: False,
        seeds: Sequence[ID] = (),
    ) -> LookupResult:
        width = width or self.config.replicas
        alpha = alpha or self.config.alpha

        async def query(peer: ID) -> list[ID]:
            reply = await self._request(
                peer,
                FindNode(
                    target=target.to_bytes(32, "big"), server=self.is_server, count=max(width, 3)
                ),
                Nodes,
            )
            return self._heard(reply.peers, target)

        return await self._lookup(target, query, width=width, alpha=alpha, done=done, seeds=seeds)

    async def find_closest(self, key: str) -> list[ID]:
        """The DHT servers nearest to `key` (what a put would store at)."""
        return (await self._lookup_nodes(record_key(key))).closest

    # ── records ──────────────────────────────────────────────────────────────────────────

    def _sign(self, key: str, value: Any, ttl: float) -> SignedEntry:
        entry = sign_entry(self._key_pair, key, value, ttl=ttl, clock=self.clock)
        try:
            check_entry(entry, self.registry, self.signatures, now=now_ms(self.clock))
        except RecordRejected as exc:
            raise ValueError(f"cannot publish under {key!r}: {exc}") from None
        return entry

    async def put(self, key: str, value: Any, *, ttl: float) -> int:
        """Sign `value` as our entry under `key` for `ttl` seconds and store it at the replicas.

        Returns how many peers hold it (this node included, as a server among the nearest).
        Raises `ValueError` for a key, value or ttl the namespace refuses, and `StoreFailed`
        when nobody took it.
        """
        self._counts["puts"] += 1
        entry = self._sign(key, value, ttl)
        return await self.put_entry(entry)

    async def put_entry(self, entry: SignedEntry) -> int:
        """Store an already signed entry (ours, or one we relay) at its replicas."""
        target = record_key(entry.key)
        width = self.config.replicas
        holders = 0

        async def query(peer: ID) -> list[ID]:
            nonlocal holders
            reply = await self._request(
                peer, Store(entries=(entry,), server=self.is_server, count=width), Stored
            )
            holders += reply.accepted
            return self._heard(reply.peers, target)

        result = await self._lookup(target, query, width=width, alpha=max(self.config.alpha, width))
        if self.is_server and self._among_nearest(target, result.closest):
            namespace, _ = check_entry(
                entry, self.registry, self.signatures, now=now_ms(self.clock)
            )
            holders += self.store.put(entry, namespace, now=now_ms(self.clock)) or self.store.holds(
                entry
            )
        if not holders:
            raise StoreFailed(
                f"no peer stored {entry.key!r} ({result.queried} asked, {result.failed} failed)"
            )
        return holders

    def _among_nearest(self, target: int, closest: list[ID]) -> bool:
        if len(closest) < self.config.replicas:
            return True
        return (self.table.own_key ^ target) < (peer_key(closest[-1]) ^ target)

    async def get(self, key: str, *, quorum: int = 1) -> dict[str, Record]:
        """Every writer's live entry under `key`, merged from the replicas that answered.

        The lookup stops once `quorum` replicas (this node counts as one) returned entries and
        the nearest of them is nearer the key than every peer not yet heard from (or once the
        `2 × replicas` nearest peers it found have answered). A put stores at every hop of its
        walk, so a peer off the nearest set may hold some writers' entries and not others; the
        nearest holder is in every writer's replica set. Raises `ValueError` when the key
        belongs to no namespace.
        """
        self._counts["gets"] += 1
        try:
            namespace = self.registry.match(key).namespace
        except RecordRejected as exc:
            raise ValueError(str(exc)) from None
        if namespace.owner is None and namespace.max_writers > 1:
            # A key many peers write to is merged from at least two replicas: once the nearest
            # peers have died, the nearest survivor may have been in some writers' replica sets
            # only (seen: 1 of 4 writers' entries after a third of 32 nodes died).
            quorum = max(quorum, 2)
        target = record_key(key)
        found: dict[bytes, tuple[SignedEntry, Any]] = {}
        holders: list[int] = []  # distances of the peers that held entries
        if self.is_server and self._merge(found, self.store.get(key, now=now_ms(self.clock))):
            holders.append(self.table.own_key ^ target)
        # Twice the replica count: a get that finds nothing keeps walking a little longer
        # (the put may have landed on nearest peers this node had not heard of yet); a get that
        # finds something stops at once, so the extra width costs only misses.
        width = 2 * self.config.replicas

        async def query(peer: ID) -> list[ID]:
            reply = await self._request(
                peer, FindValue(key=key, server=self.is_server, count=width), Value
            )
            if self._accept_answer(peer, key, reply.entries, found):
                holders.append(peer_key(peer) ^ target)
            return self._heard(reply.peers, target)

        def satisfied(nearest_open: int | None) -> bool:
            return len(holders) >= quorum and (nearest_open is None or min(holders) < nearest_open)

        await self._lookup(target, query, width=width, alpha=self.config.alpha, done=satisfied)
        records = (to_record(entry, value) for entry, value in found.values())
        return {record.writer: record for record in records}

    def _accept_answer(self, peer: ID, key: str, entries: tuple[SignedEntry, ...], found) -> bool:
        """Validate a replica's entries into `found`; True if it held any valid one."""
        good = []
        for entry in entries:
            if entry.key != key:
                detail = f"asked for {key[:80]!r}, answered with an entry of {entry.key[:80]!r}"
                self._bad_peer(peer, RecordRejected(RejectReason.WRONG_KEY, detail))
                return False
            good.append(entry)
        return self._merge(found, good, sender=peer) > 0

    def _merge(self, found, entries, *, sender: ID | None = None) -> int:
        """Validate `entries` (signatures already seen cost a hash) into `found`; count them."""
        taken = 0
        now = now_ms(self.clock)
        for entry in entries:
            try:
                _, value = check_entry(entry, self.registry, self.signatures, now=now)
            except RecordRejected as exc:
                if exc.reason.code != "expired" and sender is not None:  # clocks differ: no blame
                    self._bad_peer(sender, exc)
                continue
            taken += 1
            current = found.get(entry.writer)
            if current is None or entry.newer_than(current[0]):
                found[entry.writer] = (entry, value)
        return taken

    # ── peers ────────────────────────────────────────────────────────────────────────────

    async def find_peer(
        self, peer: ID, *, fresh: bool = False, via: Sequence[str] = ("record", "lookup")
    ) -> Found | None:
        """Where `peer` can be dialled, and how we know.

        Without `fresh`, an open connection answers at once ("connected"). Otherwise two walks
        race and the first answer wins: a get of the peer's signed peer record ("record",
        which also carries relay addresses), and a lookup of the peer's key that ends when a
        peer names it or it answers itself ("lookup": a neighbour holding a connection to it
        names it even when it is a client that no routing table lists). `via` names the walks
        to run (a caller racing them itself asks for one at a time).
        """
        if not fresh and self.book.is_connected(peer):
            return Found(PeerInfo(peer, self.book.addrs(peer)), "connected")
        found: list[Found] = []
        async with trio.open_nursery() as nursery:

            async def by_record() -> None:
                try:
                    records = await self.get(peer_record_key(peer))
                except (PeertrainError, trio.TooSlowError):
                    return
                record = records.get(peer.to_base58())
                if record is not None:
                    found.append(
                        Found(PeerInfo(peer, _dialable(record.value["addrs"], peer)), "record")
                    )
                    nursery.cancel_scope.cancel()

            async def by_lookup() -> None:
                addrs = await self._named_by_lookup(peer)
                if addrs:
                    found.append(Found(PeerInfo(peer, addrs), "lookup"))
                    nursery.cancel_scope.cancel()

            if "record" in via:
                nursery.start_soon(by_record)
            if "lookup" in via:
                nursery.start_soon(by_lookup)
        return found[0] if found else None

    async def _named_by_lookup(self, peer: ID) -> list:
        """Walk toward `peer`'s key until an answer names it (or it answers); its addresses."""
        target = peer_key(peer)
        raw = peer.to_bytes()
        named: list = []

        async def query(asked: ID) -> list[ID]:
            request = FindNode(
                target=target.to_bytes(32, "big"), server=self.is_server, count=self.config.alpha
            )
            reply = await self._request(asked, request, Nodes)
            heard = self._heard(reply.peers, target)
            if asked == peer or any(item.peer_id == raw for item in reply.peers):
                named.extend(self.book.dial_addrs(peer))
            return heard

        await self._lookup(
            target,
            query,
            width=self.config.replicas,
            alpha=self.config.alpha,
            done=lambda _open: bool(named),
        )
        return named

    async def resolve(self, peer: ID, *, timeout: float = 15.0, fresh: bool = False) -> Found:
        """Find `peer` through the DHT (`find_peer`) and connect to it. Raises `PeerNotFound`."""
        with trio.move_on_after(timeout):
            found = await self.find_peer(peer, fresh=fresh)
            if found is None or not found.info.addrs:
                raise PeerNotFound(f"no peer in the DHT knows {peer}")
            try:
                await self.host.connect(found.info)
            except Exception as exc:  # py-libp2p raises many types for failed dials
                addrs = [str(a) for a in found.info.addrs]
                raise PeerNotFound(
                    f"found {peer} ({found.how}) at {addrs} but could not connect: {exc}"
                ) from None
            self._counts["resolved"] += 1
            log.info(
                "dht: resolved %s by %s to %s",
                peer,
                found.how,
                ", ".join(str(a) for a in found.info.addrs),
            )
            return found
        raise PeerNotFound(f"could not resolve {peer} within {timeout:.0f} s")

    # ── statistics ───────────────────────────────────────────────────────────────────────

    def statistics(self) -> DhtStatistics:
        return DhtStatistics(
            mode=self.mode.value,
            bootstrapped=self.bootstrapped,
            routing=self.table.statistics(),
            storage=self.store.statistics(),
            links=len(self.links),
            lookups=self._counts["lookups"],
            puts=self._counts["puts"],
            gets=self._counts["gets"],
            answered=self.responder.answered,
            resolved=self._counts["resolved"],
            rejected=dict(self._rejected),
        )


def _dialable(addrs: list[str], peer: ID) -> list:
    """Multiaddrs from a peer record, without the trailing /p2p/<peer> that dialling adds."""
    from multiaddr import Multiaddr

    suffix = f"/p2p/{peer.to_base58()}"
    return [Multiaddr(a[: -len(suffix)] if a.endswith(suffix) else a) for a in addrs]
