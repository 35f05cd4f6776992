"""Dials that run to their end whoever asked for them: one per peer, a few at a time.

A lookup cancels its queries once it has its answer, and a request gives up after its timeout.
A dial cancelled mid-handshake wasted both halves of the Noise handshake (the peer logged "fail
to upgrade mux" and its identify stream timed out) and the next request to that peer dialled
again. With 64 nodes in one process a handshake outlived the 3 s request timeout, so most dials
were cancelled and redone: 403 dials for 50 connections, and 64 gets that never finished.
Here a dial runs in the node's nursery until it connects or fails on its own deadline, which
starts when it gets a slot; callers wait for it and later callers share it. At most `MAX_DIALS`
handshakes run at once per CPU: nodes that share one (many in one process) share the slots, else
hundreds of handshakes split one core, each outlives every deadline and the work is thrown away.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr

from .errors import DialFailed

log = logging.getLogger(__name__)

MAX_DIALS = 8  # handshakes in flight per node
MAX_PENDING = 256  # distinct peers waiting for a dial slot; beyond, a dial fails at once
STAGGER = 0.25  # seconds before the next address of a peer is dialled too (go-libp2p's delay)
PEERSTORE_TTL = 120  # seconds the peerstore keeps the addresses we dialled (host.connect's)
CIRCUIT = "/p2p-circuit"


class _Attempt:
    __slots__ = ("started", "done", "error")

    def __init__(self) -> None:
        self.started = trio.Event()  # it holds a slot (or ended without one)
        self.done = trio.Event()
        self.error: str | None = "the node stopped"  # until the dial says otherwise


class Dialer:
    """`connect(info)` for one host: shared, uncancellable dials (see the module docstring)."""

    def __init__(
        self,
        host: IHost,
        addrs: Callable[[ID], list[Multiaddr]],
        *,
        timeout: float = 10.0,
        slots: trio.CapacityLimiter | None = None,
    ) -> None:
        self.host = host
        self.addrs = addrs  # where to dial a peer known by its ID (the node's peer book)
        self.timeout = timeout  # per dial, from when it holds a slot
        self._slots = slots or trio.CapacityLimiter(MAX_DIALS)
        self._attempts: dict[ID, _Attempt] = {}
        self._nursery: trio.Nursery | None = None
        self.dialled = 0
        self.failed = 0

    def attach(self, nursery: trio.Nursery) -> None:
        """Dials run in `nursery` (the node's): they end when the node stops."""
        self._nursery = nursery

    def connected(self, peer: ID) -> bool:
        return bool(self.host.get_network().get_connections(peer))

    async def dial(self, peer: ID, patience: float | None = None) -> None:
        """`connect` at the addresses `addrs` knows for `peer`."""
        await self.connect(PeerInfo(peer, self.addrs(peer)), patience=patience)

    async def connect(self, info: PeerInfo, *, patience: float | None = None) -> None:
        """Return once connected to `info.peer_id`; `DialFailed` if the dial failed.

        Waits for a free slot, then at most `timeout`, or `patience` (`TooSlowError`): a lookup
        gives up on an address that drops packets silently as on a peer that does not answer,
        but not on a dial queued behind others on a busy CPU. Cancelling the caller or running
        out of patience stops its wait, never the dial.
        """
        if self.connected(info.peer_id):
            return
        attempt = self._attempts.get(info.peer_id)
        if attempt is None:
            attempt = self._start(info)
        await attempt.started.wait()
        with trio.fail_after(math.inf if patience is None else patience):
            await attempt.done.wait()
        if attempt.error is not None:
            raise DialFailed(f"could not connect to {info.peer_id}: {attempt.error}")

    async def connect_all(self, peers: Sequence[PeerInfo]) -> list[ID]:
        """Connect to `peers` in parallel; those reached (failures are logged at debug)."""
        reached: list[ID] = []

        async def one(info: PeerInfo) -> None:
            try:
                await self.connect(info)
            except DialFailed as exc:
                # debug: the bootstrap peers dialled here are the node's PeerKeeper's too, which
                # tells each failure's cause once; at info every failed dial was logged twice
                log.debug("dht: %s", exc)
                return
            reached.append(info.peer_id)

        async with trio.open_nursery() as nursery:
            for info in peers:
                nursery.start_soon(one, info)
        return reached

    def _start(self, info: PeerInfo) -> _Attempt:
        attempt = _Attempt()
        if self._nursery is None or len(self._attempts) >= MAX_PENDING:
            attempt.error = "too many dials pending" if self._nursery else "the node is not running"
            attempt.started.set()
            attempt.done.set()
            return attempt
        self._attempts[info.peer_id] = attempt
        self._nursery.start_soon(self._dial, info, attempt)
        return attempt

    async def _dial(self, info: PeerInfo, attempt: _Attempt) -> None:
        try:
            async with self._slots:
                attempt.started.set()
                if not self.connected(info.peer_id):  # it may have dialled us meanwhile
                    self.dialled += 1
                    with trio.fail_after(self.timeout):
                        await self._any_address(info)
            attempt.error = None
        except (Exception, trio.TooSlowError) as exc:  # noqa: BLE001 - a dial raises many unrelated py-libp2p types; every one is this dial's failure, told to its waiters
            self.failed += 1
            attempt.error = str(exc) or type(exc).__name__
        finally:
            del self._attempts[info.peer_id]
            attempt.started.set()
            attempt.done.set()

    async def _any_address(self, info: PeerInfo) -> None:
        """Dial the addresses in order, the next one `STAGGER` after the last (or at once when
        it failed); the first connection wins. py-libp2p's own dial tries one address per
        transport, and a peer's first TCP address is often one a NAT drops silently (its LAN
        address): the lookup behind it stalled for the whole dial timeout."""
        peer, errors = info.peer_id, []
        addrs = [a for a in info.addrs if CIRCUIT not in str(a)]  # circuits: node/nat dials them
        if not addrs:
            raise DialFailed("no direct address known")
        self.host.get_peerstore().add_addrs(peer, addrs, PEERSTORE_TTL)  # as host.connect does

        async def one(addr: Multiaddr, failed: trio.Event) -> None:
            try:
                await self.host.get_network().dial_addr(addr, peer)
            except Exception as exc:  # noqa: BLE001 - py-libp2p raises many types for one failed address; the others go on
                errors.append(f"{addr}: {exc or type(exc).__name__}")
                failed.set()
                return
            nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            for addr in addrs:
                failed = trio.Event()
                nursery.start_soon(one, addr, failed)
                with trio.move_on_after(STAGGER):
                    await failed.wait()
        if not self.connected(peer):
            raise DialFailed("; ".join(errors) or "no address answered")
