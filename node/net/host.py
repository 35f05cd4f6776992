"""Our libp2p host: TCP, Noise only, Yamux only, dials in milliseconds, concrete addresses.

What py-libp2p 0.8.1 does by default and why we override it (docs/libp2p-notes.md):
- it offers plaintext, secio and TLS besides Noise; a plaintext-only peer could connect.
  We register Noise alone, so negotiation with anything else fails.
- its dial loop waits ≈250 ms unless `max_connections_per_peer` connections exist;
  with a limit of 1 a dial takes a few milliseconds.
- it advertises a wildcard listen address verbatim; our address factory expands it.
- its PSK support never verifies the key; `private_network.PrivateTCP` does.
- its multistream-select client waits a round trip between header and protocol; ours does not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.exceptions import MultiError
from libp2p.network.config import ConnectionConfig
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.transport.tcp.tcp import TCP
from multiaddr import Multiaddr

from ..errors import ConnectError, DialBackedOff, NodeConfigError, PskMismatch
from .addresses import MULTIADDR_ERRORS, expand_wildcards
from .identity import Identity
from .private_network import MISMATCH
from .transport import (
    NOISE_ID,
    YAMUX_ID,
    NoiseTransport,
    YamuxConnection,
    use_pipelined_negotiation,
    use_registered_muxers,
)
from .uplink import TokenBucket

log = logging.getLogger(__name__)


def build_host(
    identity: Identity,
    *,
    psk: str | None = None,
    announce: Sequence[str] = (),
    dial_timeout: float = 10.0,
    uplink_mbit: float = 0.0,
) -> IHost:
    """A host that speaks only TCP + Noise + Yamux (+ our checked PSK when given);
    `uplink_mbit` > 0 (research/testing): everything it sends shares one uplink of that rate."""
    from .private_network import PrivateTCP

    transport = PrivateTCP(psk) if psk else TCP()
    extra = [Multiaddr(a) for a in announce]

    def advertised(candidates: list[Multiaddr]) -> list[Multiaddr]:
        return expand_wildcards([*extra, *candidates])

    muxers = {YAMUX_ID: YamuxConnection}  # our data path, libp2p's protocol IDs (node/transport)
    noise = NoiseTransport(identity.key_pair, noise_privkey=create_x25519_key_pair().private_key)
    if uplink_mbit > 0:
        noise.uplink = TokenBucket(uplink_mbit * 1e6 / 8)
    host = new_host(
        key_pair=identity.key_pair,
        sec_opt={NOISE_ID: noise},
        muxer_opt=muxers,
        transports=[transport],
        connection_config=ConnectionConfig(
            max_connections_per_peer=1,
            # libp2p's auto-connector redials known peers up to (low+high)/2 connections and
            # prunes above `high_watermark`; defaults (100/300) would dial 200 peers at once.
            min_connections=4,
            low_watermark=8,
            high_watermark=64,
            dial_timeout=dial_timeout,
            outbound_upgrade_timeout=dial_timeout,
            inbound_upgrade_timeout=dial_timeout,
        ),
        addrs_factory=advertised,
    )
    use_registered_muxers(host, muxers)
    use_pipelined_negotiation(host)
    remember_advertised_addresses(host)
    return host


ADDRESSES_MEMO_SECONDS = 1.0


def remember_advertised_addresses(host: IHost) -> None:
    host.get_addrs = AdvertisedAddresses(host)  # type: ignore[method-assign]


class AdvertisedAddresses:
    """`host.get_addrs()`, computed again only when the listeners change or a second passed.

    py-libp2p rebuilds the list on every call (transport addresses, observed ones, our factory,
    then a /p2p suffix per address: ≈ 230-290 µs of multiaddr parsing), and calls it three times
    per identify exchange and once per pubsub RPC it sends (for the signed peer record). Within
    a second only confirmed observed addresses could change, and those take several observers
    to confirm; the transport addresses are the key (≈ 20 µs to read), so a new listener
    shows at once, even one that was registered before its socket was bound."""

    def __init__(self, host: IHost):
        self._host, self._compute = host, host.get_addrs
        self._key: tuple[Multiaddr, ...] | None = None
        self._at = float("-inf")
        self._addrs: list[Multiaddr] = []

    def __call__(self) -> list[Multiaddr]:
        key = tuple(self._host.get_transport_addrs())
        now = time.monotonic()
        if key != self._key or now - self._at >= ADDRESSES_MEMO_SECONDS:
            self._key, self._at, self._addrs = key, now, self._compute()
        return list(self._addrs)


def parse_peer_addr(text: str) -> PeerInfo:
    """A full multiaddr ending in /p2p/<id> → PeerInfo, with an error that says what is wrong."""
    try:
        return info_from_p2p_addr(Multiaddr(text))
    except MULTIADDR_ERRORS as exc:
        raise NodeConfigError(
            f"{text!r} is not a peer address ({exc}); give the full address a node prints, "
            "such as /ip4/203.0.113.7/tcp/4001/p2p/12D3KooW…"
        ) from None


async def connect(host: IHost, peer: PeerInfo) -> None:
    """Connect or raise ConnectError / PskMismatch with the root cause in plain words."""
    try:
        await host.connect(peer)
    except Exception as exc:  # noqa: BLE001 - host.connect raises many unrelated types; each
        # is translated below into ConnectError / PskMismatch with its root cause in words
        if _failed_key_check(host, peer):
            raise PskMismatch(f"could not connect to {peer.peer_id}: {MISMATCH}") from None
        causes = _causes(exc)
        cause = causes[-1]  # the chain starts at exc itself, so it is never empty
        if any(_BACKED_OFF in c for c in causes):
            # nothing was dialled, so nothing is known: a refused address was blamed on a
            # possible key here, since this error names no cause
            raise DialBackedOff(
                f"could not connect to {peer.peer_id}: every address failed moments ago and "
                "libp2p waits before dialling it again; the earlier failure says why"
            ) from None
        if any(sign in c for c in causes for sign in _NOTHING_ANSWERED[:4]):
            cause += " (no node answers there: check that the peer runs and the address is its own)"
        elif not any(sign in c for c in causes for sign in _NOTHING_ANSWERED):
            # the peer took the TCP connection (or libp2p kept no reason: it retries each address
            # and keeps the last attempt's error, which under load can be a bare timeout) but no
            # secure session came of it: a private network's listener hangs up on us so
            cause += (
                " (no secure session came of it: the peer may require a pre-shared key (--psk),"
                " or offer plaintext/TLS only, which peertrain refuses)"
            )
        raise ConnectError(f"could not connect to {peer.peer_id}: {cause}") from None


# libp2p's negative cache: the peer's addresses all failed within the last seconds, not dialled
_BACKED_OFF = "recently failed all addresses"
# a dial that reached no listener: no pre-shared key or protocol can be the reason (the first
# four: no node at that address, the others say why we did not dial)
_NOTHING_ANSWERED = (
    "Connection refused",
    "No route to host",
    "Network is unreachable",
    "Name or service not known",
    "No known addresses",
    "blocked by connection gate",
)


def _failed_key_check(host: IHost, peer: PeerInfo) -> bool:
    from .private_network import PrivateTCP

    transports = host.get_network().transport_manager.get_transports()  # type: ignore[attr-defined]
    peer_text = peer.peer_id.to_base58()
    return any(isinstance(t, PrivateTCP) and t.failed_key_check(peer_text) for t in transports)


def _causes(exc: BaseException) -> list[str]:
    """The messages down an error's chain, the root cause last."""
    messages = []
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        messages.append(str(current) or type(current).__name__)  # a bare timeout has no text
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            current = current.exceptions[0]
        elif isinstance(current, MultiError) and current.errors:
            # one error per address dialled; its text numbers them ("Error 1: Failed to
            # connect after 3 attempts") and hides each one's cause, so descend as into a group
            current = current.errors[0]
        else:
            current = current.__cause__ or current.__context__
    return messages
