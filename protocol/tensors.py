"""Tensors on the wire: a small signed-able header, then raw payload bytes in verified chunks.

A tensor travels as a `TensorHeader` (msgpack: name, dtype, shape, codec, block size, payload
size, chunk size, one blake3 digest per chunk, and a root `checksum` over all of that) followed
by the payload as raw frames (`tensor_transfer.py`). The root checksum is the tensor's content
address: announce it in a signed envelope, and a receiver can check the header against it,
then every chunk against the header, as each arrives. A receiver therefore never trusts
a holder: a lying holder is caught at its first bad chunk, and the verified chunks from one
holder plus the rest from another make a whole (transfers resume at any missing chunk).

Why blake3: on this machine blake3 hashes 2.3 GB/s on one core (more with threads) against
0.41 GB/s for blake2b and 0.82 GB/s for sha256, and hashing is on the critical path of every
transfer; blake3 is a cryptographic hash, so digests hold against adversarial peers.

`check_header` does all size arithmetic on the header's integers, so a header claiming a 1 TB
shape is refused (`MessageTooLarge`) before anything is allocated. `prepare_tensor`,
`TensorDownload.finish` and hashing are synchronous: run them in a thread for big tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, TypedDict, cast

import blake3

from . import codecs, int8_blockwise
from .errors import ChecksumMismatch, DecodeError, MessageTooLarge
from .messages import Message, message
from .packing import pack
from .schema import IntRange, MaxLen

if TYPE_CHECKING:
    import torch
    from typing_extensions import Buffer

    from .error_feedback import ErrorFeedback

DIGEST_BYTES = 32
MAX_CHUNKS = 2048
MIN_CHUNK_SIZE = 1 << 16
DEFAULT_CHUNK_SIZE = 4 << 20
MAX_CHUNK_SIZE = 1 << 30
MAX_DIMS = 8
_CONTEXT = "peertrain-tensor/1"


@message("tensor/header", max_size=DIGEST_BYTES * MAX_CHUNKS + 1024)
class TensorHeader(Message):
    name: Annotated[str, MaxLen(256)]
    dtype: Annotated[str, MaxLen(16)]  # the decoded tensor's dtype
    shape: Annotated[tuple[Annotated[int, IntRange(0, 2**48)], ...], MaxLen(MAX_DIMS)]
    codec: Annotated[str, MaxLen(16)]
    block_size: Annotated[int, IntRange(1, codecs.MAX_BLOCK_SIZE)]
    nbytes: Annotated[int, IntRange(0, 2**62)]  # payload bytes on the wire
    chunk_size: Annotated[int, IntRange(MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)]
    chunk_digests: Annotated[bytes, MaxLen(DIGEST_BYTES * MAX_CHUNKS)]
    checksum: Annotated[bytes, MaxLen(DIGEST_BYTES)]

    @property
    def num_chunks(self) -> int:
        return -(-self.nbytes // self.chunk_size)

    def chunk_span(self, index: int) -> tuple[int, int]:
        """(offset, length) of chunk `index` in the payload."""
        offset = index * self.chunk_size
        return offset, min(self.chunk_size, self.nbytes - offset)

    def chunk_digest(self, index: int) -> bytes:
        return self.chunk_digests[index * DIGEST_BYTES : (index + 1) * DIGEST_BYTES]


def blake3_digest(data: object) -> bytes:
    """blake3 of any buffer; multi-threaded only for very large buffers. Transfer chunks (4 MiB)
    hash single-threaded: with peers sharing the cores, blake3's thread pool waits on the
    scheduler (measured in benchmarks/update_round.py: round 2.69 s with AUTO, 2.02 s with one
    thread, CPU use 77% → 98%)."""
    view = memoryview(data)  # type: ignore[arg-type]
    threads = blake3.blake3.AUTO if view.nbytes >= 64 << 20 else 1
    return blake3.blake3(view, max_threads=threads).digest()


def root_checksum(
    *,
    name: str,
    dtype: str,
    shape: tuple[int, ...],
    codec: str,
    block_size: int,
    nbytes: int,
    chunk_size: int,
    chunk_digests: bytes,
) -> bytes:
    fields = [
        _CONTEXT,
        name,
        dtype,
        list(shape),
        codec,
        block_size,
        nbytes,
        chunk_size,
        chunk_digests,
    ]
    return blake3_digest(pack(fields))


def choose_chunk_size(nbytes: int) -> int:
    """4 MiB chunks, doubled until the payload fits in MAX_CHUNKS of them."""
    size = DEFAULT_CHUNK_SIZE
    while size * MAX_CHUNKS < nbytes:
        size *= 2
    return size


def _numel(shape: tuple[int, ...], limit: int) -> int:
    numel = 1
    for dim in shape:
        numel *= dim
        if numel > limit:  # stop early: a hostile shape must not make a huge integer either
            return limit + 1
    return numel


def check_header(
    header: TensorHeader, *, max_nbytes: int, expected_checksum: bytes | None = None
) -> None:
    """Check an untrusted header's consistency and limits before allocating for it."""
    codec = codecs.get_codec(header.codec)
    if header.dtype not in codecs.TENSOR_DTYPES:
        raise DecodeError(f"unknown tensor dtype {header.dtype!r}")
    if header.nbytes > max_nbytes:
        raise MessageTooLarge(f"tensor payload of {header.nbytes} bytes, limit {max_nbytes}")
    most = 2 * max_nbytes + 1  # values a payload can hold: int4 packs two a byte
    numel = _numel(header.shape, most)
    if numel > most or header.nbytes != codec.payload_nbytes(numel, header.block_size):
        raise DecodeError(
            f"{header.codec} payload size {header.nbytes} does not fit shape {header.shape}"
        )
    if header.chunk_size & (header.chunk_size - 1):
        raise DecodeError("chunk size must be a power of two")
    if (
        header.num_chunks > MAX_CHUNKS
        or len(header.chunk_digests) != header.num_chunks * DIGEST_BYTES
    ):
        raise DecodeError(
            f"{len(header.chunk_digests)} digest bytes for {header.num_chunks} chunks"
        )
    if header.checksum != root_checksum(**_root_fields(header)):
        raise ChecksumMismatch("tensor header does not match its own checksum")
    if expected_checksum is not None and header.checksum != expected_checksum:
        raise ChecksumMismatch("tensor header is not the one announced")


class _RootFields(TypedDict):
    """What the root checksum covers: every header field but the checksum itself."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    codec: str
    block_size: int
    nbytes: int
    chunk_size: int
    chunk_digests: bytes


def _root_fields(header: TensorHeader) -> _RootFields:
    return {
        "name": header.name,
        "dtype": header.dtype,
        "shape": header.shape,
        "codec": header.codec,
        "block_size": header.block_size,
        "nbytes": header.nbytes,
        "chunk_size": header.chunk_size,
        "chunk_digests": header.chunk_digests,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedTensor:
    """An encoded tensor ready to serve: its header and its payload (flat uint8)."""

    header: TensorHeader
    payload: torch.Tensor


def prepare_tensor(
    name: str,
    tensor: torch.Tensor,
    *,
    codec: str = "fp32",
    block_size: int = int8_blockwise.DEFAULT_BLOCK_SIZE,
    chunk_size: int | None = None,
    error_feedback: ErrorFeedback | None = None,
) -> PreparedTensor:
    """Encode `tensor` and hash its chunks (sync; seconds for 100M values: use a thread)."""
    if error_feedback is not None:
        codec, block_size = error_feedback.codec, error_feedback.block_size
        payload = error_feedback.encode(name, tensor)
    else:
        payload = codecs.encode(tensor, codec, block_size=block_size)
    return prepare_encoded(
        name,
        payload,
        dtype=str(tensor.dtype).removeprefix("torch."),
        shape=tuple(tensor.shape),
        codec=codec,
        block_size=block_size,
        chunk_size=chunk_size,
    )


def prepare_encoded(
    name: str,
    payload: torch.Tensor,
    *,
    dtype: str,
    shape: tuple[int, ...],
    codec: str,
    block_size: int,
    chunk_size: int | None = None,
) -> PreparedTensor:
    """Hash an already encoded payload (flat uint8, e.g. from an error-feedback encoder)."""
    raw = payload.numpy()
    chunk_size = chunk_size or choose_chunk_size(raw.nbytes)
    digests = b"".join(
        blake3_digest(raw[i : i + chunk_size]) for i in range(0, raw.nbytes, chunk_size)
    )
    fields: _RootFields = dict(
        name=name,
        dtype=dtype,
        shape=tuple(shape),
        codec=codec,
        block_size=block_size,
        nbytes=raw.nbytes,
        chunk_size=chunk_size,
        chunk_digests=digests,
    )
    header = TensorHeader(**fields, checksum=root_checksum(**fields))
    check_header(header, max_nbytes=raw.nbytes)  # our own payload must fit its codec, too
    return PreparedTensor(header=header, payload=payload)


def _empty_uint8(nbytes: int) -> torch.Tensor:
    import torch

    return torch.empty(nbytes, dtype=torch.uint8)


class TensorDownload:
    """A receiver's state for one tensor: a preallocated payload and which chunks verified."""

    def __init__(
        self,
        header: TensorHeader,
        *,
        max_nbytes: int,
        expected_checksum: bytes | None = None,
        allocate: Callable[[int], torch.Tensor] | None = None,
    ) -> None:
        """`allocate(nbytes)` may supply the payload buffer (a reused one: see the node's
        receive buffers); it must return a contiguous uint8 tensor of exactly `nbytes`."""
        import torch

        check_header(header, max_nbytes=max_nbytes, expected_checksum=expected_checksum)
        self.header = header
        self.payload = (allocate or _empty_uint8)(header.nbytes)
        if self.payload.dtype != torch.uint8 or self.payload.shape != (header.nbytes,):
            raise ValueError("allocate() must return a flat uint8 tensor of the payload's size")
        self._view = memoryview(cast("Buffer", self.payload.numpy()))  # numpy's stubs: 3.12+
        self._verified = bytearray(header.num_chunks)
        self.verified_nbytes = 0  # read by progress displays while the download runs

    def chunk_buffer(self, index: int) -> memoryview:
        """Where chunk `index` goes: read straight into it, then call `verify_chunk`."""
        offset, length = self.header.chunk_span(index)
        return self._view[offset : offset + length]

    def verify_chunk(self, index: int) -> None:
        if blake3_digest(self.chunk_buffer(index)) != self.header.chunk_digest(index):
            raise ChecksumMismatch(f"chunk {index} of {self.header.name} does not match its digest")
        if not self._verified[index]:
            self.verified_nbytes += self.header.chunk_span(index)[1]
        self._verified[index] = 1

    def missing_chunks(self) -> list[int]:
        return [i for i, done in enumerate(self._verified) if not done]

    def next_missing_range(self) -> tuple[int, int] | None:
        """(first missing chunk, count of consecutive missing chunks), or None when complete."""
        missing = self.missing_chunks()
        if not missing:
            return None
        count = 1
        while count < len(missing) and missing[count] == missing[0] + count:
            count += 1
        return missing[0], count

    @property
    def complete(self) -> bool:
        return all(self._verified)

    def finish(self, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Decode the verified payload (sync: use a thread for big tensors)."""
        if not self.complete:
            raise RuntimeError(f"{len(self.missing_chunks())} chunks are still missing")
        h = self.header
        return codecs.decode(
            self.payload, h.codec, dtype=h.dtype, shape=h.shape, block_size=h.block_size, out=out
        )
