"""A DHT node: Kademlia on libp2p streams, with signed, expiring, namespaced records.

    dht = Dht(host, DhtConfig(), bootstrap=[peer_info], penalise=scoreboard.penalise)
    await nursery.start(dht.run)             # serves at once; bootstraps in the background
    await dht.wait_bootstrapped()            # optional: once a server is in its table
    await dht.put(stage_key("run1", 3), {"tput": 812.0}, ttl=60)
    servers = await dht.get(stage_key("run1", 3))      # {writer peer ID: Record}
    info = await dht.resolve(peer_id)        # a bare peer ID → connected PeerInfo

What differs from py-libp2p's KadDHT, and why (docs/libp2p-notes.md):
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

This module wires the parts and runs them: the mode switch, penalties, statistics. The work it
hands out lives with its concept:
    config.py      DhtConfig, DhtMode
    walker.py      a request to a peer, lookups from our table (what every walk teaches it)
    values.py      put / put_entry / get: signed entries at and from a key's replicas
    resolution.py  find_peer / resolve: a bare peer ID → addresses → a connection
    serving.py     answering other nodes' requests
    bootstrap.py   joining: bootstrap, the first wide walk, periodic refresh
    table_feed.py  who joins the routing table (servers) and who stays out (clients)
    watcher.py     new connections → routing table (through the table feed)
    dialer.py      dials that finish whoever gave up on them, one per peer

Why this module is long: it is the node's one public face (put, get, resolve, mode, statistics)
and the wiring of the parts above; what each part does lives in its own module.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from peertrain.protocol.errors import PeertrainError, ProtocolError

from .announce import keep_announced
from .bootstrap import Bootstrapper
from .channels import Links, Server
from .config import DEFAULT_CONFIG, DhtConfig, DhtMode
from .dialer import Dialer
from .errors import RecordRejected
from .keyspace import record_key
from .messages import DHT_PROTOCOL, REQUEST_TYPES, RESPONSE_TYPES, Ping, Pong
from .namespaces import MAX_PEER_ADDRS, NamespaceRegistry, default_registry, peer_record_key
from .peers import PeerBook
from .records import Record, SignatureCache, SignedEntry, now_ms
from .resolution import Found, Resolver
from .routing import RoutingStatistics, RoutingTable
from .serving import Responder
from .storage import RecordStore, StoreStatistics
from .table_feed import TableFeed
from .values import Values
from .walker import Walker
from .watcher import ConnectionWatcher

if TYPE_CHECKING:  # libp2p installs trio-typing, whose stubs shadow trio's and hide TaskStatus
    from trio_typing import TaskStatus

__all__ = ["DEFAULT_CONFIG", "Dht", "DhtConfig", "DhtMode", "DhtStatistics", "Found"]

log = logging.getLogger(__name__)

Penalise = Callable[[str, float, str], Any]
BAD_ANSWER_PENALTY = 25.0


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
        dial_slots: trio.CapacityLimiter | None = None,
    ) -> None:
        self.host = host
        self.config = config
        self.own = host.get_id()
        self.registry = registry or default_registry()
        self.is_server = config.mode is DhtMode.SERVER
        self._penalise = penalise
        self.clock = clock
        self._key_pair = KeyPair(host.get_private_key(), host.get_public_key())
        self.table = RoutingTable(self.own, bucket_size=config.bucket_size, clock=clock)
        self.store = RecordStore(max_entries=config.max_records, max_bytes=config.max_record_bytes)
        self.signatures = SignatureCache()
        self.book = PeerBook(host)
        # dial_slots: handshakes in flight, shared by nodes that share a CPU (dialer.py)
        self.dialer = Dialer(
            host, self.book.dial_addrs, timeout=2 * config.request_timeout, slots=dial_slots
        )
        self.feed = TableFeed(self.table, self.book)
        self.connected_keys: dict[int, ID] = {}
        self.extra_addrs: list[str] = []  # e.g. relay circuit addresses, for our peer record
        self._counts: Counter[str] = Counter()
        self._rejected: Counter[str] = Counter()
        self._running = False
        self._wire_streams(is_banned)
        self._wire_work(bootstrap)

    def _wire_streams(self, is_banned: Callable[[str], bool]) -> None:
        """The stream side: our requests (`links`), answers to others (`server`), and the
        connection watcher that feeds the routing table."""
        self.links = Links(
            self.host,
            DHT_PROTOCOL,
            RESPONSE_TYPES,
            on_bad_peer=self._bad_peer,
            connect=self.dialer.dial,
        )
        self.responder = Responder(
            is_server=self.is_server,
            table=self.table,
            store=self.store,
            registry=self.registry,
            signatures=self.signatures,
            book=self.book,
            connected_keys=self.connected_keys,
            on_server_peer=self.feed.add_server,
            on_client_peer=self.feed.said_client,
            on_reject=self._bad_peer,
            clock=self.clock,
        )
        self.server = Server(
            self.host,
            DHT_PROTOCOL,
            REQUEST_TYPES,
            self.responder,
            on_bad_peer=self._bad_peer,
            is_banned=is_banned,
        )
        self.watcher = ConnectionWatcher(
            self.host,
            self.feed,
            connected_keys=self.connected_keys,
            close_peer=self.links.close_peer,
            identify_wait=self.config.identify_wait,
        )

    def _wire_work(self, bootstrap: Sequence[PeerInfo]) -> None:
        """The work this node hands out: walks (walker.py), records (values.py), peers
        (resolution.py), joining (bootstrap.py). They share our counters, so `statistics`
        reads one place."""
        self.walker = Walker(
            own=self.own,
            config=self.config,
            links=self.links,
            table=self.table,
            book=self.book,
            is_server=lambda: self.is_server,
            on_server_peer=self.feed.add_server,
            counts=self._counts,
        )
        self.values = Values(
            walker=self.walker,
            config=self.config,
            key_pair=self._key_pair,
            registry=self.registry,
            signatures=self.signatures,
            store=self.store,
            on_reject=self._bad_peer,
            counts=self._counts,
            clock=self.clock,
        )
        self.resolver = Resolver(
            host=self.host,
            walker=self.walker,
            book=self.book,
            get=self.values.get,
            config=self.config,
            counts=self._counts,
        )
        self.joining = Bootstrapper(
            host=self.host,
            config=self.config,
            table=self.table,
            walker=self.walker,
            feed=self.feed,
            dialer=self.dialer,
            peers=bootstrap,
        )

    # ── lifecycle ────────────────────────────────────────────────────────────────────────

    async def run(self, *, task_status: TaskStatus[Dht] = trio.TASK_STATUS_IGNORED) -> None:
        network = self.host.get_network()
        network.register_notifee(self.watcher)
        if self.is_server:
            self.server.register()
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                self.links.attach(nursery)
                self.dialer.attach(nursery)
                await nursery.start(self.watcher.run)
                nursery.start_soon(self.joining.maintain)
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
        except Exception as exc:  # noqa: BLE001 - best effort, any libp2p failure: requests tell them too
            log.debug("dht: identify push after a mode change: %s", exc)

    async def wait_bootstrapped(self) -> None:
        """Wait until the bootstrap walk put a server in the table: from then on lookups work."""
        await self.joining.done.wait()

    @property
    def bootstrapped(self) -> bool:
        return self.joining.done.is_set()

    async def bootstrap(self, peers: Sequence[PeerInfo] = ()) -> int:
        """Connect to `peers` (and the configured ones), then look ourselves up, one peer wide
        (`Bootstrapper.bootstrap`). Returns the routing table's size. Safe to call again."""
        return await self.joining.bootstrap(peers)

    async def refresh(self) -> None:
        """Self-lookup plus a random lookup in up to 3 buckets no lookup went through lately."""
        await self.joining.refresh()

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
        circuit addresses (identify mangles those, docs/libp2p-notes.md), set by whoever makes them.
        """
        own = [str(a) for a in self.host.get_addrs()]
        return {"addrs": list(dict.fromkeys([*self.extra_addrs, *own]))[:MAX_PEER_ADDRS]}

    async def publish_peer_record(self) -> int:
        """Put our peer record once; returns how many peers hold it."""
        return await self.put(
            peer_record_key(self.own), self.peer_record(), ttl=self.config.peer_record_ttl
        )

    async def _publish_peer_record(self) -> None:
        await self.joining.done.wait()
        await keep_announced(
            self, peer_record_key(self.own), self.peer_record, ttl=self.config.peer_record_ttl
        )

    # ── peers and penalties ──────────────────────────────────────────────────────────────

    async def probe(self, peer: ID) -> bool:
        """Ping `peer`; add it to the table if it serves. False if it failed or is a client."""
        try:
            pong = await self.links.request(
                peer, Ping(server=self.is_server), Pong, timeout=self.config.request_timeout
            )
        except (PeertrainError, trio.TooSlowError):
            return False
        if pong.server:
            self.feed.add_server(peer)
        return pong.server

    def _bad_peer(self, peer: ID, exc: ProtocolError) -> None:
        points = exc.reason.penalty if isinstance(exc, RecordRejected) else BAD_ANSWER_PENALTY
        code = exc.reason.code if isinstance(exc, RecordRejected) else type(exc).__name__
        self._rejected[code] += 1
        log.warning("dht: rejected input from %s: %s", peer, exc)
        if self._penalise is not None and points > 0:  # 0: clocks explain it, nobody to blame
            self._penalise(peer.to_base58(), points, f"dht: {exc}")

    # ── records and peers: `values.py`, `resolution.py` ─────────────────────────────────

    async def find_closest(self, key: str) -> list[ID]:
        """The DHT servers nearest to `key` (what a put would store at)."""
        return (await self.walker.lookup_nodes(record_key(key))).closest

    async def put(self, key: str, value: Any, *, ttl: float) -> int:
        """Sign `value` as our entry under `key` for `ttl` seconds and store it at the replicas;
        how many peers hold it. Raises `ValueError` (refused by the namespace) or `StoreFailed`
        (`Values.put`)."""
        return await self.values.put(key, value, ttl=ttl)

    async def put_entry(self, entry: SignedEntry) -> int:
        """Store an already signed entry (ours, or one we relay) at its replicas."""
        return await self.values.put_entry(entry)

    async def get(self, key: str, *, quorum: int = 1) -> dict[str, Record]:
        """Every writer's live entry under `key`, merged from at least `quorum` replicas
        (`Values.get`). Raises `ValueError` when the key belongs to no namespace."""
        return await self.values.get(key, quorum=quorum)

    async def find_peer(
        self, peer: ID, *, fresh: bool = False, via: Sequence[str] = ("record", "lookup")
    ) -> Found | None:
        """Where `peer` can be dialled, and how we know: an open connection unless `fresh`,
        else the first of the walks in `via` to answer (`Resolver.find_peer`)."""
        return await self.resolver.find_peer(peer, fresh=fresh, via=via)

    async def resolve(self, peer: ID, *, timeout: float = 15.0, fresh: bool = False) -> Found:  # noqa: ASYNC109 - running out of time is PeerNotFound, not a cancellation
        """Find `peer` through the DHT (`find_peer`) and connect to it. Raises `PeerNotFound`."""
        return await self.resolver.resolve(peer, timeout=timeout, fresh=fresh)

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
