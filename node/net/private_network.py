"""Private networks: a pre-shared key (PSK) that every connection must prove before anything else.

py-libp2p's own PSK support encrypts the raw connection but never checks the key: a peer with
another key (or none) sends garbage that multistream-select waits on until a timeout, with no
error that says why (docs/libp2p-notes.md). Our wrapper around the TCP transport has both sides
send `nonce ‖ Salsa20(psk, nonce)(MAGIC)` first and verify the other's before the Noise
handshake. A mismatch is refused in one round trip, with a clear error on both sides. The
rest of the connection stays Salsa20-encrypted under the PSK, as in libp2p's pnet, so a
private run's traffic is unreadable without the key even before Noise. The magic makes this
incompatible with go-libp2p's pnet, which no peertrain peer needs.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict

import trio
from Crypto.Cipher import Salsa20
from libp2p.io.abc import ReadWriteCloser
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.transport.exceptions import OpenConnectionError
from libp2p.transport.tcp.tcp import TCP, TCPListener
from multiaddr import Multiaddr

from .addresses import value_of

log = logging.getLogger(__name__)

MAGIC = b"ptpsk\x00v1"
NONCE_SIZE = 8
HANDSHAKE_TIMEOUT = 5.0
MISMATCH = (
    "pre-shared key mismatch: the peer is not in this private network (check --psk on both sides)"
)


class PskStream(ReadWriteCloser):
    """Salsa20 in both directions over a raw byte stream, after the key check."""

    def __init__(
        self,
        inner: ReadWriteCloser,
        *,
        reader: Salsa20.Salsa20Cipher,
        writer: Salsa20.Salsa20Cipher,
    ):
        self._inner = inner
        self._reader = reader
        self._writer = writer

    async def write(self, data: bytes) -> None:
        await self._inner.write(self._writer.encrypt(data))

    async def read(self, n: int | None = None) -> bytes:
        data = await self._inner.read(n)
        return self._reader.decrypt(data) if data else b""

    async def close(self) -> None:
        await self._inner.close()

    def get_remote_address(self) -> tuple[str, int] | None:
        return self._inner.get_remote_address()

    def get_local_address(self) -> tuple[str, int] | None:
        getter = getattr(self._inner, "get_local_address", None)
        return getter() if getter else None


async def _read_exactly(stream: ReadWriteCloser, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.read(n - len(buf))
        if not chunk:
            raise OpenConnectionError(MISMATCH + " (connection closed during the key check)")
        buf += chunk
    return bytes(buf)


async def psk_handshake(stream: ReadWriteCloser, psk: bytes) -> PskStream:
    """Prove and check the key; return the encrypted stream. Raises OpenConnectionError."""
    nonce = os.urandom(NONCE_SIZE)
    writer = Salsa20.new(key=psk, nonce=nonce)
    await stream.write(nonce + writer.encrypt(MAGIC))
    with trio.move_on_after(HANDSHAKE_TIMEOUT) as scope:
        hello = await _read_exactly(stream, NONCE_SIZE + len(MAGIC))
    if scope.cancelled_caught:
        raise OpenConnectionError(MISMATCH + " (no key proof within 5 s)")
    reader = Salsa20.new(key=psk, nonce=hello[:NONCE_SIZE])
    if reader.decrypt(hello[NONCE_SIZE:]) != MAGIC:
        raise OpenConnectionError(MISMATCH)
    return PskStream(stream, reader=reader, writer=writer)


class PrivateTCP(TCP):
    """TCP whose every connection, dialed or accepted, starts with the PSK check."""

    def __init__(self, psk_hex: str) -> None:
        super().__init__()
        self._psk = bytes.fromhex(psk_hex)
        # The swarm flattens our error into "fail to open connection"; remember which peers
        # failed the key check so `host.connect` callers can say so. Bounded, newest kept.
        self._mismatched: OrderedDict[str, None] = OrderedDict()

    def failed_key_check(self, peer_id: str) -> bool:
        return peer_id in self._mismatched

    async def dial(self, maddr: Multiaddr) -> RawConnection:
        return await self._protect(await super().dial(maddr), maddr)

    async def dial_with_source(self, maddr: Multiaddr, source: tuple[str, int]) -> RawConnection:
        return await self._protect(await super().dial_with_source(maddr, source), maddr)

    async def _protect(self, raw: RawConnection, maddr: Multiaddr) -> RawConnection:
        try:
            stream = await psk_handshake(raw.stream, self._psk)
        except BaseException as exc:
            await raw.close()
            if isinstance(exc, OpenConnectionError):
                self._remember_mismatch(maddr)
            raise
        self._mismatched.pop(_peer_of(maddr), None)
        return RawConnection(stream, True)

    def _remember_mismatch(self, maddr: Multiaddr) -> None:
        self._mismatched[_peer_of(maddr)] = None
        self._mismatched.move_to_end(_peer_of(maddr))
        while len(self._mismatched) > 256:
            self._mismatched.popitem(last=False)

    def create_listener(self, handler_function) -> TCPListener:  # type: ignore[override]
        psk = self._psk
        refusals = RefusalLog()

        async def checked(stream: ReadWriteCloser) -> None:
            try:
                protected = await psk_handshake(stream, psk)
            except OpenConnectionError as exc:
                refusals.refused(stream, exc)
                await stream.close()
                return
            await handler_function(protected)

        return TCPListener(checked)


REFUSAL_LOG_SECONDS = 60.0  # one warning per remote host this often, however often it dials


class RefusalLog:
    """Warn about a refused connection once per remote host per REFUSAL_LOG_SECONDS: a peer
    with another key redials every few seconds (and py-libp2p retries each dial), which
    flooded the log with the same warning (20 in 6 s). The next warning counts those skipped."""

    def __init__(self, max_hosts: int = 256) -> None:
        self._hosts: OrderedDict[str, tuple[float, int]] = OrderedDict()  # → (last warned, skipped)
        self._max_hosts = max_hosts

    def refused(self, stream: ReadWriteCloser, exc: Exception) -> None:
        text = _peer_text(stream)
        host = text.rsplit(":", 1)[0]
        now = trio.current_time()
        warned, skipped = self._hosts.get(host, (float("-inf"), 0))
        if now - warned < REFUSAL_LOG_SECONDS:
            self._hosts[host] = (warned, skipped + 1)
            return
        more = f" ({skipped} more from {host} refused since)" if skipped else ""
        log.warning("refused connection from %s: %s%s", text, exc, more)
        self._hosts[host] = (now, 0)
        self._hosts.move_to_end(host)
        while len(self._hosts) > self._max_hosts:
            self._hosts.popitem(last=False)


def _peer_of(maddr: Multiaddr) -> str:
    return value_of(maddr, "p2p") or ""


def _peer_text(stream: ReadWriteCloser) -> str:
    addr = stream.get_remote_address() if hasattr(stream, "get_remote_address") else None
    return f"{addr[0]}:{addr[1]}" if addr else "unknown address"
