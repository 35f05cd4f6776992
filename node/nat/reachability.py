"""Is this node reachable from the internet? Asked of peers, answered by a fresh dial back.

libp2p's AutoNAT v1 gets this wrong both ways (docs/libp2p-notes.md): a public node advertising
0.0.0.0 is told "private", and a NATed node is told "public" because the server "dials back"
over the connection that already exists. Our check, `/peertrain/dialback/1.0.0` (its server and
messages are in dialback.py; this module asks and decides):

    client ── DialbackRequest(addrs=[its listen addresses]) ──▶ server
    server: builds a throwaway host (new key, so a new peer ID; new socket, so a new source
            port) and dials the client's peer ID at each address it may dial:
              - a candidate whose IP is the one the server sees the client coming from;
              - the seen IP with each candidate's port (a forwarded port, an outer NAT address).
            The Noise handshake proves it reached *the client*, not whoever holds that address.
    client ◀── DialbackResponse(observed=…, reached=[…], tried=[…]) ── server

Only the seen IP is ever dialed, so the service cannot be used to make us dial third parties.
The client asks at least `min_servers` distinct peers and decides: "public" when an address was
reached by at least `min_servers` of them, "private" when that many answered and none reached
anything, "unknown" otherwise. Servers count by IP prefix (/24, /48; `server_key`): fresh peer
IDs are free, so two of them on one prefix are one voice and cannot flip the verdict. Loopback
and LAN servers count one per peer (one machine or one LAN: test swarms live there).
`Reachability.text` says it to the user in plain words.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost, INetConn, INetwork
from libp2p.peer.id import ID
from multiaddr import Multiaddr
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.framing import read_message, write_message

from ..errors import DialbackUnavailable
from ..net.addresses import value_of
from ..net.budget import ip_prefix
from ..net.connections import direct_conns, remote_addr
from ..net.notifee import ConnectionEvents
from ..net.penalties import PeerScoreboard
from .dialback import (
    DIALBACK,
    MAX_CANDIDATES,
    DialbackRequest,
    DialbackResponse,
    DialbackServer,
    ProbeBook,
    close_quietly,
    new_probe_seed,
)

log = logging.getLogger(__name__)

MAX_UNDECIDED_DELAY = 60.0
ARRIVAL_SETTLE = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Reachability:
    """What the node knows about how others can reach it."""

    status: str  # "public" | "private" | "unknown"
    addrs: tuple[str, ...] = ()  # dialed back by at least `min_servers` peers
    observed_ips: tuple[str, ...] = ()  # how peers see us
    answers: int = 0
    checked_at: float | None = None  # time.time()
    circuits: tuple[str, ...] = ()  # relay addresses others can reach us through
    text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "addrs": list(self.addrs),
            "observed_ips": list(self.observed_ips),
            "answers": self.answers,
            "checked_at": self.checked_at,
            "circuits": list(self.circuits),
            "text": self.text,
        }


def decide(
    answers: list[DialbackResponse],
    *,
    peer_id: str,
    listen: list[str],
    min_servers: int = 2,
    circuits: tuple[str, ...] = (),
    servers: list[str] | None = None,
) -> Reachability:
    """Turn servers' answers into a verdict and the words for it. `servers[i]` is the
    `server_key` of whoever gave `answers[i]` (None: every answer from a distinct server)."""
    keys = servers if servers is not None else [str(i) for i in range(len(answers))]
    reached_by: dict[str, set[str]] = {}
    for key, answer in zip(keys, answers, strict=True):
        for addr in set(answer.reached):
            reached_by.setdefault(addr, set()).add(key)
    confirmed = tuple(a for a, by in sorted(reached_by.items()) if len(by) >= min_servers)
    observed = tuple(dict.fromkeys(a.observed for a in answers))
    if confirmed:
        status = "public"
    elif len(set(keys)) >= min_servers:
        status = "private"
    else:
        status = "unknown"
    text = verdict_text(
        status,
        confirmed=confirmed,
        observed=observed,
        peer_id=peer_id,
        listen=listen,
        answers=len(answers),
        min_servers=min_servers,
        circuits=circuits,
    )
    return Reachability(
        status=status,
        addrs=confirmed,
        observed_ips=observed,
        answers=len(answers),
        checked_at=time.time(),
        circuits=circuits,
        text=text,
    )


def verdict_text(
    status: str,
    *,
    confirmed: tuple[str, ...],
    observed: tuple[str, ...],
    peer_id: str,
    listen: list[str],
    answers: int,
    min_servers: int,
    circuits: tuple[str, ...] = (),
) -> str:
    if status == "public":
        where = ", ".join(f"{a}/p2p/{peer_id}" for a in confirmed)
        scope = _scope(confirmed)
        return f"reachable directly at {where} ({scope}dialed back by {min_servers}+ peers)"
    if status == "unknown":
        return (
            f"reachability not known yet: {answers} of the {min_servers} peers needed answered "
            "the dial-back check; connect to more peers (--bootstrap) to find out"
        )
    seen = " / ".join(observed) or "?"
    ports = sorted({_port(a) for a in listen if _port(a)}) or ["4001"]
    local = next((_host_port(a) for a in listen if not _is_loopback(a)), "this machine's address")
    fixes = (
        f"1. forward TCP port {ports[0]} on your router to this machine ({local}) and restart "
        f"with --announce /ip4/{observed[0] if observed else '<public ip>'}/tcp/{ports[0]}; "
        "2. or enable UPnP on your router; "
        "3. or run the node on a machine with a public IP address"
    )
    if circuits:
        return (
            f"behind NAT (peers see you as {seen}): reachable through relays "
            f"{', '.join(circuits)}; direct connections by hole punching when the other side "
            f"allows. For direct connections from everyone: {fixes}"
        )
    return (
        f"behind NAT: peers see you as {seen} but cannot connect back to you. Outgoing "
        f"connections work. To accept connections: {fixes}"
    )


def server_key(peer: str, ip: str | None) -> str:
    """Who a dial-back server counts as: its IP prefix when public (fresh IDs on one prefix
    are one voice), itself when on loopback, a LAN, or an address we cannot place."""
    if ip is None:
        return f"peer:{peer}"
    address = ipaddress.ip_address(ip)
    return ip_prefix(ip) if address.is_global else f"peer:{peer}"


def _scope(confirmed: tuple[str, ...]) -> str:
    """Who can use these addresses: a loopback or LAN address is no join string for strangers."""
    ips = []
    for addr in confirmed:
        ip = value_of(addr, "ip4")
        if ip is None:
            return ""
        ips.append(ipaddress.ip_address(ip))
    if ips and all(ip.is_loopback for ip in ips):
        return "from this machine only: "
    if ips and all(ip.is_private for ip in ips):
        return "from your local network only: "
    return ""


def _port(addr: str) -> str | None:
    return value_of(addr, "tcp")


def _host_port(addr: str) -> str:
    ip, port = value_of(addr, "ip4"), value_of(addr, "tcp")
    return f"{ip}:{port}" if ip is not None and port is not None else addr


def _is_loopback(addr: str) -> bool:
    ip = value_of(addr, "ip4")
    return ip is not None and ipaddress.ip_address(ip).is_loopback


class ReachabilityCheck:
    """Serves dial-backs and, every `interval` seconds, checks this node's own reachability."""

    def __init__(
        self,
        host: IHost,
        *,
        min_servers: int = 2,
        max_servers: int = 3,
        interval: float = 600.0,
        retry: float = 2.0,
        timeout: float = 15.0,
        serve: bool = True,
        psk: str | None = None,
        circuits: Callable[[], list[str]] | None = None,
        scoreboard: PeerScoreboard | None = None,  # penalises a malformed dial-back request
    ):
        self.host = host
        self.circuits = circuits  # the relay addresses we hold reservations on, when relays run
        self.min_servers, self.max_servers = min_servers, max_servers
        self.interval, self.retry, self.timeout = interval, retry, timeout
        self.server = (
            DialbackServer(host, psk=psk, scoreboard=scoreboard) if serve else None
        )  # a private network dials back with its key
        self.current = Reachability(status="unknown", text="reachability not checked yet")
        self._answers: list[tuple[str, DialbackResponse]] = []  # of the check that set `current`
        self._arrivals = _Arrivals()
        self._changed = trio.Event()
        self._probes = ProbeBook()

    def is_probe(self, peer: ID) -> bool:
        """True for a throwaway identity a server dials us back with (recently asked for)."""
        return self._probes.holds(peer)

    def peers(self) -> list[ID]:
        """Connected peers, without our own dial-back probes: they are gone within a second and
        were never peers (status, the verdict and the wait for servers count these)."""
        return [p for p in self.host.get_connected_peers() if not self.is_probe(p)]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self.server is not None:
            self.server.register()
        self.host.get_network().register_notifee(self._arrivals)
        task_status.started()
        delay = self.retry  # undecided (too few peers yet): ask again soon, then less often
        while True:
            if (await self.check()).status != "unknown":
                delay = self.retry
                await trio.sleep(self.interval)
            else:
                with trio.move_on_after(delay):
                    await self._enough_peers()
                delay = min(delay * 2, MAX_UNDECIDED_DELAY, self.interval)

    async def _enough_peers(self) -> None:
        """Return once new connections bring us to `min_servers` peers (checked 1 s after each
        arrival: identify has run by then, and our own dial-back probes have gone again)."""
        while True:
            await self._arrivals.event.wait()
            self._arrivals.event = trio.Event()
            await trio.sleep(ARRIVAL_SETTLE)
            if len(self.peers()) >= self.min_servers:
                return

    async def wait_changed(self) -> Reachability:
        """The next verdict (or the same verdict said with other relays)."""
        await self._changed.wait()
        return self.current

    def circuits_changed(self) -> None:
        """Say the current verdict again with the relays we hold now (no new dial-backs)."""
        if self.current.status == "unknown":
            return
        self._set(self._verdict(self._answers), announce=True)

    async def wait_decided(self) -> Reachability:
        """The first verdict other than "unknown"."""
        while self.current.status == "unknown":
            await self._changed.wait()
        return self.current

    async def check(self) -> Reachability:
        """Ask up to `max_servers` connected peers; update and return the verdict."""
        peers = self.peers()
        random.shuffle(peers)
        answers: list[tuple[str, DialbackResponse]] = []

        async def ask(peer: ID) -> None:
            try:
                answer = await self.ask(peer)
            except PeertrainError as exc:
                log.debug("dial-back check with %s: %s", peer, exc)
                return
            answers.append((server_key(peer.to_base58(), self._ip_of(peer)), answer))

        async with trio.open_nursery() as nursery:
            for peer in peers[: self.max_servers]:
                nursery.start_soon(ask, peer)
        verdict = self._verdict(answers)
        if verdict.status != "unknown" or self.current.status == "unknown":
            self._answers = answers
            self._set(verdict, announce=verdict.status != self.current.status)
        return self.current

    def _ip_of(self, peer: ID) -> str | None:
        """The IP we reach `peer` at (a relay's, for a relayed connection)."""
        conns = self.host.get_network().get_connections(peer)
        addr = remote_addr((direct_conns(conns) or conns)[0]) if conns else None
        return value_of(addr, "ip4") or value_of(addr, "ip6") if addr is not None else None

    def _verdict(self, answers: list[tuple[str, DialbackResponse]]) -> Reachability:
        return decide(
            [answer for _, answer in answers],
            servers=[key for key, _ in answers],
            peer_id=self.host.get_id().to_base58(),
            listen=[str(a) for a in self.host.get_addrs()],
            min_servers=self.min_servers,
            circuits=tuple(self.circuits()) if self.circuits else (),
        )

    def _set(self, verdict: Reachability, *, announce: bool) -> None:
        if announce:
            log.info("reachability: %s", verdict.text)
        self.current = verdict
        self._changed.set()
        self._changed = trio.Event()

    async def ask(self, peer: ID) -> DialbackResponse:
        addrs = tuple(_without_p2p(a) for a in self.host.get_addrs())[:MAX_CANDIDATES]
        seed = new_probe_seed()
        self._probes.expect(seed, for_seconds=2 * self.timeout + 2.0)
        request = DialbackRequest(addrs=addrs, probe_seed=seed)
        with trio.move_on_after(self.timeout):
            try:
                stream = await self.host.new_stream(peer, [str(DIALBACK)])
            except Exception as exc:  # noqa: BLE001 - upstream raises many types for "no such
                # protocol" or "connection gone": either way this peer cannot help
                raise DialbackUnavailable(f"{peer} does not serve {DIALBACK}: {exc}") from exc
            try:
                await write_message(stream, request, idle_timeout=self.timeout)
                response = await read_message(stream, DialbackResponse, idle_timeout=self.timeout)
            finally:
                await close_quietly(stream)
            if response.request_id != request.request_id:
                raise DialbackUnavailable(f"{peer} answered another request")
            return response
        raise DialbackUnavailable(
            f"{peer} did not answer the dial-back check in {self.timeout:.0f} s"
        )


def address_translated(host: IHost) -> bool | None:
    """True when peers saw us at an IPv4 address we do not listen on (a NAT rewrote it), False
    when they saw only our own, None before any observation. An early hint, from identify's
    observed addresses (libp2p's ObservedAddrManager, one observer is enough), not a verdict:
    a forwarded port is translated and still reachable."""
    manager = getattr(host, "_observed_addr_manager", None)
    if manager is None:
        return None
    try:
        observed = {_ip4(a) for a in manager.addrs(min_observers=1)} - {None}
    except Exception as exc:  # noqa: BLE001 - a private upstream object: if its internals
        # changed, the hint is lost, not the node; say so once the log is read
        log.warning("reachability: no address-translation hint: %s", exc, exc_info=True)
        return None
    if not observed:
        return None
    return bool(observed - {_ip4(a) for a in host.get_addrs()})


def _ip4(addr: Multiaddr) -> str | None:
    return value_of(addr, "ip4")


class _Arrivals(ConnectionEvents):
    """Sets `event` when a connection opens, so an undecided check can ask again at once."""

    def __init__(self) -> None:
        self.event = trio.Event()

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self.event.set()


def _without_p2p(addr: Multiaddr) -> str:
    return str(addr).split("/p2p/")[0]
