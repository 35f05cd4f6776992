"""The dial-back protocol, `/peertrain/dialback/1.0.0`: a peer dials us back from a stranger.

The server side builds a throwaway host (new key, new socket) for every check and dials the
client only at the IP it sees the request come from, so the service cannot be used to make us
dial third parties. The client side and the verdict are in reachability.py. The client names the
probes' keys by a seed in its request, so it knows their peer IDs and keeps them out of its peers.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from typing import Annotated

import trio
from libp2p.abc import IHost, INetStream
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Request, Response, message
from peertrain.protocol.schema import MaxLen

from ..net.addresses import value_of
from ..net.host import build_host
from ..net.identity import Identity
from ..net.penalties import PeerScoreboard
from ..net.request_rate import RequestRate
from ..net.rpc import serve_one
from ..net.streams import close_quietly

log = logging.getLogger(__name__)

DIALBACK = protocol_id("dialback", "1.0.0")
MAX_CANDIDATES = 8
MAX_DIALS = 4
SEED_BYTES = 32
Addr = Annotated[str, MaxLen(256)]


@message("node/dialback-request", max_size=4096)
class DialbackRequest(Request):
    addrs: Annotated[tuple[Addr, ...], MaxLen(MAX_CANDIDATES)]
    # The i-th probe's key derives from it (`probe_identity`); empty from an older client: the
    # server then takes random keys. Knowing it lets a server pose as a probe, which only hides
    # that server from the client's peer list for a moment: nothing is trusted by probe IDs.
    probe_seed: Annotated[bytes, MaxLen(SEED_BYTES)] = b""


def new_probe_seed() -> bytes:
    return secrets.token_bytes(SEED_BYTES)


def probe_identity(seed: bytes, index: int) -> Identity:
    """The identity of the `index`-th probe dialed for a request carrying `seed`."""
    if len(seed) != SEED_BYTES:
        return Identity.generate()
    key_seed = hashlib.sha256(seed + index.to_bytes(1, "big")).digest()
    return Identity.from_key_pair(create_new_key_pair(key_seed))


class ProbeBook:
    """The peer IDs of the probes our own requests asked for, until they can no longer come."""

    def __init__(self, max_known: int = 256) -> None:  # a check asks 3 servers × MAX_DIALS
        self.max_known = max_known
        self._until: dict[ID, float] = {}

    def expect(self, seed: bytes, *, for_seconds: float) -> None:
        now = time.monotonic()
        self._until = {p: t for p, t in self._until.items() if t > now}
        while len(self._until) >= self.max_known:
            del self._until[next(iter(self._until))]
        for i in range(MAX_DIALS):
            self._until[probe_identity(seed, i).peer_id] = now + for_seconds

    def holds(self, peer: ID) -> bool:
        return self._until.get(peer, 0.0) > time.monotonic()


@message("node/dialback-response", max_size=4096)
class DialbackResponse(Response):
    observed: Addr  # the IP the server saw the request come from
    reached: Annotated[tuple[Addr, ...], MaxLen(MAX_DIALS)]
    tried: Annotated[tuple[Addr, ...], MaxLen(MAX_DIALS)]


def dial_targets(candidates: tuple[str, ...], observed_ip: str) -> list[Multiaddr]:
    """The addresses a server may dial for a client seen at `observed_ip`, at most MAX_DIALS."""
    targets: list[str] = []
    ports: list[str] = []
    for text in candidates[:MAX_CANDIDATES]:
        ip, port = value_of(text, "ip4"), value_of(text, "tcp")
        if ip is None or port is None:  # a malformed or non-ip4/tcp candidate is not dialed
            continue
        if ip == observed_ip:
            targets.append(f"/ip4/{ip}/tcp/{port}")
        ports.append(port)
    targets += [f"/ip4/{observed_ip}/tcp/{port}" for port in ports]
    return [Multiaddr(t) for t in dict.fromkeys(targets)][:MAX_DIALS]


async def dial_fresh(
    peer: ID,
    addr: Multiaddr,
    *,
    timeout: float,  # noqa: ASYNC109 (it bounds the probe host's dial and handshake too)
    psk: str | None = None,
    identity: Identity | None = None,
) -> bool:
    """Can a stranger (new key, new socket) complete a handshake with `peer` at `addr`?"""
    probe = build_host(identity or Identity.generate(), psk=psk, dial_timeout=timeout)
    reached = False
    try:
        async with probe.run([]):
            with trio.move_on_after(timeout):
                await probe.connect(PeerInfo(peer, [addr]))
                reached = True
            # Hang up before the host goes: leaving `run` does not close its connections, and the
            # peer would list the probe as a connected peer until its socket is collected.
            with trio.move_on_after(1.0):
                await probe.disconnect(peer)
    except Exception as exc:  # noqa: BLE001 - refused, timed out, wrong peer (upstream raises
        # many types): all mean "not reached", which is the answer this probe reports
        log.debug("dial-back to %s at %s failed: %s", peer, addr, exc)
    return reached


class DialbackServer:
    """Answers dial-back requests, a few at a time (each costs a host and some dials), one at a
    time per peer, and at the pace `RequestRate` allows each IP block (peer IDs are free)."""

    def __init__(
        self,
        host: IHost,
        *,
        psk: str | None = None,
        dial_timeout: float = 3.0,
        max_concurrent: int = 4,
        scoreboard: PeerScoreboard | None = None,
        rate: RequestRate | None = None,
    ):
        self.host, self.psk, self.scoreboard = host, psk, scoreboard
        self.dial_timeout = dial_timeout
        self.rate = rate or RequestRate()
        self._limiter = trio.CapacityLimiter(max_concurrent)
        self._serving: set[str] = set()  # bounded by max_concurrent (others are refused)

    def register(self) -> None:
        self.host.set_stream_handler(str(DIALBACK), self._on_stream)

    async def _on_stream(self, stream: INetStream) -> None:
        peer = stream.muxed_conn.peer_id
        remote = stream.get_remote_address()
        key = peer.to_base58()
        busy = key in self._serving or self._limiter.available_tokens == 0
        if remote is None or busy or not self.rate.admits(remote[0]):
            await close_quietly(stream)  # busy, too often, or nothing to dial: ask elsewhere
            return
        self._serving.add(key)  # one check at a time per peer, so one peer cannot hog us

        async def handle(request: DialbackRequest) -> DialbackResponse:
            return await self.answer(peer, remote[0], request)

        try:
            async with self._limiter:
                await serve_one(
                    stream,
                    key,
                    DialbackRequest,
                    handle,
                    scoreboard=self.scoreboard,
                    idle_timeout=self.dial_timeout,
                    label=str(DIALBACK),
                )
        finally:
            self._serving.discard(key)
            await close_quietly(stream)

    async def answer(
        self, peer: ID, observed_ip: str, request: DialbackRequest
    ) -> DialbackResponse:
        targets = dial_targets(request.addrs, observed_ip)
        results = [False] * len(targets)

        async def one(i: int) -> None:
            results[i] = await dial_fresh(
                peer,
                targets[i],
                timeout=self.dial_timeout,
                psk=self.psk,
                identity=probe_identity(request.probe_seed, i),
            )

        async with trio.open_nursery() as nursery:
            for i in range(len(targets)):
                nursery.start_soon(one, i)
        reached = tuple(str(t) for t, ok in zip(targets, results, strict=True) if ok)
        return request.reply(
            DialbackResponse,
            observed=observed_ip,
            reached=reached,
            tried=tuple(str(t) for t in targets),
        )
