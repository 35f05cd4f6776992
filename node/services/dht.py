"""The daemon's DHT: discovery wired to the node's penalties, bootstrap list and control API.

`dht/` knows nothing of the node (docs/design.md §1); this service hands it what the node has: the
host, the bootstrap peers (the DHT bootstraps from them and from any peer that connects), the
scoreboard (bad records cost their sender points, banned peers are refused), and exposes:

    control method `resolve_peer` {"peer": "<bare peer ID>"}  find it through the DHT, connect
    status()                                                   what `peertrain status` shows

`peertrain join <peer ID>` uses `resolve_peer` once the daemon serves (node/cli/main.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypedDict

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.dht import Dht, DhtConfig, DhtMode, PeerNotFound, peer_record_key
from peertrain.protocol.errors import PeertrainError

from ..errors import ControlError, NodeError
from ..net.addresses import MULTIADDR_ERRORS
from ..net.penalties import PeerScoreboard

log = logging.getLogger(__name__)

MAX_REMEMBERED = 64  # resolutions shown in status


class ResolvedPeer(TypedDict):
    """A peer found through the DHT: how ("lookup" | "record"), at which addresses, when."""

    peer: str
    how: str
    addrs: list[str]
    at: float  # time.time()


class DhtServiceStatus(TypedDict):
    """`status["dht"]` of `peertrain status --json`: the DHT's statistics (dht/node.py
    `DhtStatistics`, as a dict) and the peers resolved lately, by base58 ID."""

    mode: str
    bootstrapped: bool
    routing: dict[str, int]
    storage: dict[str, int]
    links: int
    lookups: int
    puts: int
    gets: int
    answered: int
    resolved: dict[str, ResolvedPeer]
    rejected: dict[str, int]


class DhtService:
    def __init__(
        self,
        host: IHost,
        scoreboard: PeerScoreboard,
        bootstrap: Sequence[PeerInfo],
        *,
        mode: DhtMode = DhtMode.SERVER,
        connect: Callable[[ID, list[Multiaddr]], Awaitable[str]] | None = None,
    ) -> None:
        self.host = host
        self.dht = Dht(
            host,
            DhtConfig(mode=mode),
            bootstrap=bootstrap,
            penalise=scoreboard.penalise,
            is_banned=scoreboard.is_banned,
        )
        self.resolved: dict[str, ResolvedPeer] = {}
        # NAT traversal's connect (dials circuits, which host.connect refuses); None: the DHT's
        self.connect = connect

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.dht.run)
            task_status.started()

    async def put(self, key: str, value: Any, *, ttl: float) -> int:
        """Store our signed `value` under `key` for `ttl` seconds (dht/node.py's `put`)."""
        return await self.dht.put(key, value, ttl=ttl)

    async def get(self, key: str) -> dict[str, Any]:
        """Every writer's live record under `key` (dht/node.py's `get`)."""
        return await self.dht.get(key)

    async def wait_bootstrapped(self) -> None:
        await self.dht.wait_bootstrapped()

    async def advertise(self, addrs: list[str]) -> None:
        """Put `addrs` first in our peer record (circuits, dialed-back addresses: what identify
        would mangle or does not know); published now when the DHT has peers, else with the
        first announcement after bootstrap."""
        self.dht.extra_addrs = list(addrs)
        if self.dht.bootstrapped:
            try:
                await self.dht.publish_peer_record()
            except PeertrainError as exc:  # the periodic re-announcement will carry them
                log.info("publishing circuit addresses: %s", exc)

    async def serve(self, public: bool) -> None:
        """DHT server mode when others can dial us (reachability says "public"), else client."""
        await self.dht.set_mode(DhtMode.SERVER if public else DhtMode.CLIENT)

    async def resolve_peer(self, text: str, *, timeout: float = 8.0) -> dict[str, Any]:
        """Find the peer with ID `text` through the DHT (even when already connected: the answer
        says how the DHT knows it, "record" or "lookup") and connect to it."""
        try:
            peer = ID.from_base58(text)
            peer.to_bytes()
        except ValueError:  # base58's own error for a character outside its alphabet
            raise ControlError(
                f"{text!r} is not a peer ID (a base58 string such as 12D3KooW…)"
            ) from None
        if peer == self.host.get_id():
            raise ControlError("that is this node's own peer ID")
        with trio.move_on_after(timeout):
            await self.dht.wait_bootstrapped()
        if not self.dht.bootstrapped:
            raise ControlError("the DHT has no peers yet: give a reachable --bootstrap address")
        if self.connect is not None:
            return await self._resolve_and_connect(peer, within=timeout)
        try:
            found = await self.dht.resolve(peer, timeout=timeout, fresh=True)
        except PeerNotFound as exc:
            raise ControlError(str(exc)) from None
        return self._remember(peer, found.how, [str(a) for a in found.info.addrs])

    async def _resolve_and_connect(self, peer: ID, *, within: float) -> dict[str, Any]:
        """Like `Dht.resolve`, but dials circuits too. The lookup and the peer record are read
        at once and each is dialed as soon as it answers; the first connection wins. A lookup
        usually answers first, with addresses a NATed peer cannot be reached at; its record
        carries circuits (and dialed-back addresses first)."""
        won: list[dict[str, Any]] = []
        errors: list[str] = []
        heard: list[str] = []
        started = time.perf_counter()

        def ms() -> float:
            return (time.perf_counter() - started) * 1000

        async def via(how: str, find: Callable[[], Awaitable[list[Multiaddr]]]) -> None:
            addrs = await find()
            log.info("resolving %s: %s answered after %.0f ms: %s", peer, how, ms(), addrs)
            if not addrs:
                return
            heard.append(how)
            try:
                kind = await self.connect(peer, addrs)
            except NodeError as exc:
                errors.append(str(exc))
                return
            log.info("resolving %s: connected (%s, %s) after %.0f ms", peer, kind, how, ms())
            if won:  # both answered and connected before the cancel reached this task
                return
            won.append({**self._remember(peer, how, [str(a) for a in addrs]), "connection": kind})
            nursery.cancel_scope.cancel()

        with trio.move_on_after(within) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(via, "lookup", lambda: self._lookup_addrs(peer))
                nursery.start_soon(via, "record", lambda: self._record_addrs(peer))
        if won:
            return won[0]
        if errors:
            raise ControlError(f"found {peer} but {errors[-1]}")
        if not heard and not scope.cancelled_caught:
            raise ControlError(f"no peer in the DHT knows {peer}")
        raise ControlError(f"could not resolve {peer} within {within:.0f} s")

    async def _lookup_addrs(self, peer: ID) -> list[Multiaddr]:
        found = await self.dht.find_peer(peer, fresh=True, via=("lookup",))
        return list(found.info.addrs) if found else []

    async def _record_addrs(self, peer: ID) -> list[Multiaddr]:
        try:
            records = await self.dht.get(peer_record_key(peer))
        except (PeertrainError, trio.TooSlowError):
            return []
        record = records.get(peer.to_base58())
        suffix = f"/p2p/{peer.to_base58()}"
        out = []
        for text in record.value.get("addrs", []) if record is not None else []:
            if not isinstance(text, str):  # a malformed entry in a signed record: skip it
                continue
            try:
                out.append(Multiaddr(text.removesuffix(suffix)))
            except MULTIADDR_ERRORS:  # a malformed address in a signed record: skip it
                continue
        return out

    async def reconnect(self, peer: ID, *, timeout: float = 3.0) -> str:
        """Connect to `peer` again after its connection dropped: at the addresses it was last
        resolved to (a circuit: its relay is dialed first, no DHT needed, which may have lost
        its peers too), else by resolving it afresh. Raises ControlError."""
        last = self.resolved.get(peer.to_base58())
        if last is not None and self.connect is not None:
            with trio.move_on_after(timeout):
                try:
                    return await self.connect(peer, [Multiaddr(a) for a in last["addrs"]])
                except NodeError as exc:
                    log.info("reconnecting to %s at its last addresses: %s", peer, exc)
        found = await self.resolve_peer(peer.to_base58(), timeout=timeout)
        return str(found.get("connection") or found["how"])

    def _remember(self, peer: ID, how: str, addrs: list[str]) -> ResolvedPeer:
        entry = ResolvedPeer(peer=peer.to_base58(), how=how, addrs=addrs, at=time.time())
        self.resolved[entry["peer"]] = entry
        while len(self.resolved) > MAX_REMEMBERED:
            self.resolved.pop(next(iter(self.resolved)))
        return entry

    def status(self) -> DhtServiceStatus:
        stats = dataclasses.asdict(self.dht.statistics())
        stats["resolved"] = dict(self.resolved)
        return DhtServiceStatus(**stats)
