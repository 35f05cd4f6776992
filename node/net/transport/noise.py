"""Noise (`/noise`) with a fast data path: libp2p's handshake, our own transport messages.

py-libp2p 0.8.1 runs the XX handshake well, but its data path costs more than the cipher:
every Noise message is its own socket write, every read is a 2-byte read followed by an
exact read of the body, and a large write is cut at 65 519 bytes and awaited piece by piece.
We keep its handshake (`Transport.secure_*`, unchanged, so identity checks and payload
signatures stay upstream's; only our own payload is signed once per transport instead of once
per connection) and replace only what follows it:

- writes: a batch of buffers becomes many Noise messages encrypted (`encrypt_into`) into one
  reused buffer and written with plain system calls, trio only waiting for room; small
  pieces (a Yamux header, a window update) share one message instead of costing one each;
- reads (`noise_receive.SealedReader`): one `recv_into` of up to 1 MiB, then the muxer pulls
  the messages in it one by one and decrypts each straight into the buffer of the stream
  reader that waits for it (or, without one, into a new object); `read()` serves multistream.

The wire format is Noise's own and libp2p's: a 2-byte big-endian length, then at most 65 535
bytes of ChaCha20-Poly1305 ciphertext (16 of them the tag), nonces counting up from the
handshake's, no associated data. A stock py-libp2p or go-libp2p peer cannot tell us apart.

A send is atomic: it is shielded from cancellation, because half a Noise message on the wire
breaks the connection for every stream on it. A send that makes no progress for
`SEND_STALL_TIMEOUT` seconds (the peer stopped reading), or that outlives its caller's deadline
by `DEADLINE_GRACE`, closes the connection instead.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Sequence

import trio
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from libp2p.abc import IRawConnection, ISecureConn
from libp2p.io.exceptions import ConnectionClosedError
from libp2p.peer.id import ID
from libp2p.security.base_session import BaseSession
from libp2p.security.noise.messages import NoiseExtensions, NoiseHandshakePayload
from libp2p.security.noise.patterns import IPattern, PatternXX
from libp2p.security.noise.transport import PROTOCOL_ID
from libp2p.security.noise.transport import Transport as StockNoiseTransport
from libp2p.security.secure_session import SecureSession
from multiaddr import Multiaddr

from ..uplink import TokenBucket
from .errors import NoiseError
from .noise_receive import MAX_MESSAGE, TAG, Buffer, SealedReader

__all__ = ["PROTOCOL_ID", "MAX_PLAINTEXT", "NoiseSession", "NoiseTransport"]

log = logging.getLogger(__name__)

MAX_PLAINTEXT = MAX_MESSAGE - TAG
COALESCE_BELOW = 16 * 1024  # pieces smaller than this share Noise messages (copied once)
SEND_STALL_TIMEOUT = 30.0  # seconds without any progress before a send gives up
DEADLINE_GRACE = 2.0  # seconds a send may outlive its caller's deadline to finish a message
MAX_NONCE = (1 << 64) - 1  # reserved by Noise; a connection never gets near it

_LENGTH = struct.Struct(">H")
_NONCE = struct.Struct("<4xQ")  # 32 zero bits, then the 64-bit counter, little-endian (Noise §5.2)


class NoiseTransport(StockNoiseTransport):
    """libp2p's Noise XX handshake, then our `NoiseSession` for everything after it."""

    _payload: NoiseHandshakePayload | None = None
    uplink: TokenBucket | None = None  # research/testing: every session's sends share it

    async def secure_inbound(self, conn: IRawConnection) -> ISecureConn:
        return self._shaped(NoiseSession.take_over(await super().secure_inbound(conn), conn))

    async def secure_outbound(self, conn: IRawConnection, peer_id: ID) -> ISecureConn:
        return self._shaped(
            NoiseSession.take_over(await super().secure_outbound(conn, peer_id), conn)
        )

    def _shaped(self, session: ISecureConn) -> ISecureConn:
        if isinstance(session, NoiseSession):
            session.uplink = self.uplink
        return session

    def get_pattern(self) -> IPattern:
        if self.early_data is not None:  # a payload that may change: upstream's way
            return super().get_pattern()
        return _SignedOncePatternXX(self)


class _SignedOncePatternXX(PatternXX):
    """Upstream's XX handshake, with our handshake payload signed once per transport, not once
    per connection: it signs our fixed static Noise key, so it never changes (saves an Ed25519
    signature and its debug formatting on every connection setup)."""

    def __init__(self, transport: NoiseTransport) -> None:
        super().__init__(transport.local_peer, transport.libp2p_privkey, transport.noise_privkey)
        self._transport = transport

    def make_handshake_payload(
        self, extensions: NoiseExtensions | None = None
    ) -> NoiseHandshakePayload:
        if extensions is not None:
            return super().make_handshake_payload(extensions)
        if self._transport._payload is None:
            self._transport._payload = super().make_handshake_payload()
        return self._transport._payload


class NoiseSession(BaseSession):
    """A secured connection: Noise transport messages over a raw connection, batched."""

    def __init__(
        self,
        session: SecureSession,
        raw: IRawConnection,
        *,
        send_key: bytes,
        send_nonce: int,
        recv_key: bytes,
        recv_nonce: int,
    ) -> None:
        super().__init__(
            local_peer=session.local_peer,
            local_private_key=session.local_private_key,
            remote_peer=session.remote_peer,
            remote_permanent_pubkey=session.remote_permanent_pubkey,
            is_initiator=session.is_initiator,
        )
        self._raw = raw
        self._socket = _trio_socket_of(raw)
        self._encrypt_into = ChaCha20Poly1305(send_key).encrypt_into
        self._send_nonce = send_nonce
        self.reader = SealedReader(raw, self._socket, recv_key, recv_nonce)
        self._plain: deque[Buffer] = deque()  # decrypted, not yet handed out
        self._outbuf = bytearray()
        self._write_lock = trio.Lock()
        self.uplink: TokenBucket | None = None  # a shaped daemon's one uplink (uplink.py)
        self._reading = False
        self._closed = False

    @classmethod
    def take_over(cls, session: ISecureConn, raw: IRawConnection) -> ISecureConn:
        """Our data path on a freshly handshaken stock session (unchanged unless ChaChaPoly)."""
        reader = getattr(session, "conn", None)
        protocol = getattr(getattr(reader, "noise_state", None), "noise_protocol", None)
        if not isinstance(session, SecureSession) or protocol is None or session.high_watermark:
            return session
        sending, receiving = protocol.cipher_state_encrypt, protocol.cipher_state_decrypt
        if "ChaCha" not in type(sending.cipher).__name__:
            return session
        return cls(
            session, raw,
            send_key=bytes(sending.k), send_nonce=sending.n,
            recv_key=bytes(receiving.k), recv_nonce=receiving.n,
        )  # fmt: skip

    # ------------------------------------------------------------------ reading

    async def read_chunks(self) -> list[Buffer]:
        """Plaintext pieces in order: everything available now, at least one; [] at EOF."""
        with self._exclusive_read():
            if self._plain:
                return self.take_pending()
            while await self.reader.receive():
                if chunks := self.reader.open_all():
                    return chunks
            return []

    def take_pending(self) -> list[Buffer]:
        """Plaintext already decrypted by `read()` and not yet handed out (the muxer takes it
        before pulling messages from `reader` itself)."""
        chunks = list(self._plain)
        self._plain.clear()
        return chunks

    async def read(self, n: int | None = None) -> bytes:
        """Up to `n` bytes (all that is decrypted if None); b"" at EOF."""
        if n == 0:
            return b""
        with self._exclusive_read():
            while not self._plain:
                if not await self.reader.receive():
                    return b""
                self._plain.extend(self.reader.open_all())
            first = self._plain[0]
            if n is None or n < 0 or len(first) <= n:
                self._plain.popleft()
                return first if isinstance(first, bytes) else bytes(first)
            view = memoryview(first)
            self._plain[0] = view[n:]
            return bytes(view[:n])

    def _exclusive_read(self) -> _ReadGuard:
        return _ReadGuard(self)

    # ------------------------------------------------------------------ writing

    async def write(self, data: Buffer) -> None:
        await self.write_parts((data,))

    async def write_parts(self, parts: Sequence[Buffer]) -> None:
        """Send the concatenation of `parts` as Noise messages, in one socket write.

        All or nothing: a cancellation can only interrupt it before anything is encrypted
        (while it waits for the lock); after that everything is sent, or the connection fails.
        """
        async with self._write_lock:
            if self.uplink is not None:  # before sealing: a cancelled wait sends nothing
                await self.uplink.take(sum(len(p) for p in parts))
            out = self._seal(parts)
            if out:
                await self._send(out)

    def _seal(self, parts: Sequence[Buffer]) -> memoryview:
        plaintexts = _split_into_messages(parts)
        size = sum(len(p) for p in plaintexts) + (2 + TAG) * len(plaintexts)
        if len(self._outbuf) < size:
            self._outbuf = bytearray(size)
        if self._send_nonce + len(plaintexts) >= MAX_NONCE:
            raise NoiseError("Noise nonce exhausted; the connection must be re-established")
        out, pos, nonce = memoryview(self._outbuf), 0, self._send_nonce
        for plain in plaintexts:
            sealed = len(plain) + TAG
            _LENGTH.pack_into(out, pos, sealed)
            self._encrypt_into(_NONCE.pack(nonce), plain, None, out[pos + 2 : pos + 2 + sealed])
            nonce += 1
            pos += 2 + sealed
        self._send_nonce = nonce
        return out[:pos]

    async def _send(self, out: memoryview) -> None:
        if self._closed:
            raise ConnectionClosedError("connection is closed", transport="tcp")
        # Shielded, so half a message never goes out; bounded, so a stuck peer cannot hold us:
        # no progress for SEND_STALL_TIMEOUT, or the caller's deadline long past, ends it all.
        give_up = trio.current_effective_deadline() + DEADLINE_GRACE
        with trio.CancelScope(shield=True):
            try:
                if not await self._send_all(out, give_up):
                    await self.close()
                    raise ConnectionClosedError(
                        "peer took no data in time; connection closed", transport="tcp"
                    )
            except (trio.ClosedResourceError, trio.BrokenResourceError, OSError) as exc:
                raise ConnectionClosedError(
                    f"connection failed while writing: {exc!r}", transport="tcp"
                ) from exc

    async def _send_all(self, out: memoryview, give_up: float) -> bool:
        """Send everything; False if it stalled or ran past `give_up`."""
        if self._socket is None:
            with trio.move_on_at(min(give_up, trio.current_time() + SEND_STALL_TIMEOUT)):
                await self._raw.write(bytes(out))
                return True
            return False
        # Straight system calls while the kernel takes bytes; trio only to wait for room. Its
        # socket.send yields to the scheduler after every call, ~4 times per MiB in bulk.
        fd, sent, total = self._socket.fileno(), 0, len(out)
        while sent < total:
            try:
                sent += os.write(fd, out[sent:])
                continue
            except BlockingIOError:
                pass
            with trio.move_on_at(min(give_up, trio.current_time() + SEND_STALL_TIMEOUT)):
                await trio.lowlevel.wait_writable(self._socket)
                continue
            return False
        return True

    # ------------------------------------------------------------------ the rest

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._raw.close()

    def get_remote_address(self) -> tuple[str, int] | None:
        return self._raw.get_remote_address()

    def get_transport_addresses(self) -> list[Multiaddr]:
        return self._raw.get_transport_addresses()

    def get_connection_type(self):  # type: ignore[no-untyped-def]
        return self._raw.get_connection_type()


class _ReadGuard:
    """Two tasks reading one session at once is a bug: fail loudly, as trio streams do."""

    __slots__ = ("_session",)

    def __init__(self, session: NoiseSession) -> None:
        self._session = session

    def __enter__(self) -> None:
        if self._session._reading:
            raise trio.BusyResourceError("another task is already reading this Noise session")
        self._session._reading = True

    def __exit__(self, *exc: object) -> None:
        self._session._reading = False


def _split_into_messages(parts: Sequence[Buffer]) -> list[Buffer]:
    """Plaintexts of at most MAX_PLAINTEXT bytes: small neighbours joined, large parts sliced."""
    messages: list[Buffer] = []
    small = bytearray()
    for part in parts:
        size = len(part)
        if not size:
            continue
        if size < COALESCE_BELOW:
            if len(small) + size > MAX_PLAINTEXT:
                messages.append(small)
                small = bytearray()
            small += part
            continue
        if small:
            messages.append(small)
            small = bytearray()
        view = memoryview(part).cast("B") if isinstance(part, memoryview) else memoryview(part)
        messages.extend(
            view[offset : offset + MAX_PLAINTEXT] for offset in range(0, size, MAX_PLAINTEXT)
        )
    if small:
        messages.append(small)
    return messages


def _trio_socket_of(raw: IRawConnection) -> trio.socket.SocketType | None:
    """The trio socket under a plain TCP raw connection, if that is what it is."""
    tcp = getattr(raw, "stream", None)  # libp2p's TrioTCPStream
    socket_stream = getattr(tcp, "stream", None)
    if type(tcp).__name__ == "TrioTCPStream" and isinstance(socket_stream, trio.SocketStream):
        return socket_stream.socket
    return None
