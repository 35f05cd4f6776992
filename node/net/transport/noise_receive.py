"""The receiving half of a Noise session: sealed messages in one buffer, opened where asked.

One `recv_into` takes up to `RECV_BUFFER` bytes (once bulk traffic has grown the buffer to
that): many whole messages per system call. The muxer pulls them one at a time (`next_size`,
then `open`) and says where each plaintext goes: into a reader's own buffer (`decrypt_into`, no
copy after the kernel's) or into a new bytes object. Ciphertext that fails authentication raises
NoiseError; a destination it was being decrypted into then holds garbage past what its reader
was told is filled, and the connection is done.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import trio
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from libp2p.abc import IRawConnection
from libp2p.io.exceptions import ConnectionClosedError

from .errors import NoiseError

TAG = 16
MAX_MESSAGE = 65535  # Noise's limit for one transport message, tag included
FIRST_BUFFER = 2 * (2 + MAX_MESSAGE)  # a new session's buffer: 1 MiB costs ~1 ms to allocate
RECV_BUFFER = 1 << 20  # grown to under bulk traffic: ~16 full messages per system call

_NONCE = struct.Struct("<4xQ")  # 32 zero bits, then the 64-bit counter, little-endian (Noise §5.2)

Buffer = bytes | bytearray | memoryview


class SealedReader:
    """Ciphertext from the connection, opened message by message in order."""

    def __init__(
        self, raw: IRawConnection, socket: trio.socket.SocketType | None, key: bytes, nonce: int
    ) -> None:
        self._raw = raw
        self._socket = socket
        cipher = ChaCha20Poly1305(key)
        self._decrypt: Callable[..., bytes] = cipher.decrypt
        self._decrypt_into: Callable[..., int] = cipher.decrypt_into
        self._nonce = nonce
        self._inbuf = bytearray(FIRST_BUFFER)
        self._inview = memoryview(self._inbuf)
        self._start = 0  # unparsed ciphertext is _inbuf[_start:_end]
        self._end = 0
        self._grow = False  # set when a read filled all the room there was
        self.eof = False

    def next_size(self) -> int | None:
        """Plaintext size of the next whole message in the buffer; None if there is none yet."""
        buf, pos = self._inbuf, self._start
        if self._end - pos < 2:
            return None
        length = (buf[pos] << 8) | buf[pos + 1]
        if self._end - pos - 2 < length:
            return None
        if length < TAG:
            raise NoiseError(f"Noise message of {length} bytes is shorter than its tag")
        return length - TAG

    def open(self, size: int, into: memoryview | None = None) -> Buffer:
        """Decrypt the next message (`size` from `next_size`) into `into` or a new object.

        `into`, when given, is a writable byte view of exactly `size` bytes; it is returned.
        """
        pos = self._start + 2
        sealed = self._inview[pos : pos + size + TAG]
        nonce = _NONCE.pack(self._nonce)
        try:
            if into is None:
                plain: Buffer = self._decrypt(nonce, sealed, None)
            else:
                self._decrypt_into(nonce, sealed, None, into)
                plain = into
        except InvalidTag:
            raise NoiseError("a Noise message failed authentication") from None
        self._nonce += 1
        pos += size + TAG
        if pos == self._end:
            self._start = self._end = 0
        else:
            self._start = pos
        return plain

    def open_all(self) -> list[Buffer]:
        """Every whole message in the buffer, decrypted into new objects (empty ones skipped)."""
        chunks: list[Buffer] = []
        while (size := self.next_size()) is not None:
            plain = self.open(size)
            if plain:
                chunks.append(plain)
        return chunks

    async def receive(self) -> bool:
        """Wait until a whole message is buffered; False at a clean end of the connection."""
        while self.next_size() is None:
            if self.eof:
                return False
            if not await self._fill():
                self.eof = True
                if self._end > self._start:
                    raise NoiseError("connection closed in the middle of a Noise message")
                return False
        return True

    async def _fill(self) -> bool:
        """Append bytes from the connection to the buffer; False at EOF."""
        if len(self._inbuf) - self._end < 2 + MAX_MESSAGE:
            self._make_room()
        try:
            if self._socket is not None:
                got = await self._socket.recv_into(self._inview[self._end :])
            else:
                data = await self._raw.read(len(self._inbuf) - self._end)
                got = len(data)
                self._inbuf[self._end : self._end + got] = data
        except trio.ClosedResourceError:
            return False
        except OSError as exc:
            raise ConnectionClosedError(
                f"connection failed while reading: {exc}", transport="tcp"
            ) from exc
        if got == len(self._inbuf) - self._end and len(self._inbuf) < RECV_BUFFER:
            self._grow = True  # the kernel had more than we could take: bulk traffic
        self._end += got
        return got > 0

    def _make_room(self) -> None:
        """Room for a whole message after `_end`: a bigger buffer if bulk traffic asked for one,
        else the unparsed tail moved to the front."""
        pending = self._end - self._start
        if self._grow:
            self._grow = False
            bigger = bytearray(min(2 * len(self._inbuf), RECV_BUFFER))
            bigger[:pending] = self._inview[self._start : self._end]
            self._inbuf, self._inview = bigger, memoryview(bigger)
        elif self._start:
            # a copy, not a view: the regions may overlap, and the assignment is a memcpy
            self._inbuf[:pending] = self._inbuf[self._start : self._end]
        self._start, self._end = 0, pending
