"""Moving a prepared tensor over a stream: header requests and resumable chunk-range requests.

    client                                   holder
    TensorHeaderRequest(checksum)      ->
                                       <-    TensorHeaderReply(header) | ErrorResponse
    TensorRangeRequest(checksum, first_chunk, count) ->
                                       <-    TensorRangeReply(first_chunk, count) | ErrorResponse
                                       <-    one raw frame per chunk, in order

Chunks are read straight into the download's preallocated payload (`read_exactly_into`) and
verified one by one against the header's digests. If a holder fails (`StreamEnded`,
`PeerTimeout`) or lies (`ChecksumMismatch`) mid-range, the chunks already verified stay, and
`download.next_missing_range()` says where to resume with the next holder. The reader never
stops reading for long (hashing a 4 MiB chunk takes about 2 ms), as Yamux requires (framing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, cast

from .errors import DecodeError
from .framing import (
    DEFAULT_IDLE_TIMEOUT,
    MIN_WRITE_RATE,
    ByteStream,
    read_exactly_into,
    read_frame_length,
    read_message,
    write_frame,
    write_message,
)
from .messages import ErrorCode, ErrorResponse, Request, Response, check_reply, message
from .schema import IntRange, MaxLen
from .tensors import DIGEST_BYTES, MAX_CHUNKS, PreparedTensor, TensorDownload, TensorHeader

if TYPE_CHECKING:
    import torch
    from typing_extensions import Buffer

Checksum = Annotated[bytes, MaxLen(DIGEST_BYTES)]
ChunkIndex = Annotated[int, IntRange(0, MAX_CHUNKS)]


@message("tensor/header-request", max_size=128)
class TensorHeaderRequest(Request):
    checksum: Checksum


@message("tensor/header-reply", max_size=TensorHeader.wire_max_size + 64)
class TensorHeaderReply(Response):
    header: TensorHeader


@message("tensor/range-request", max_size=128)
class TensorRangeRequest(Request):
    checksum: Checksum
    first_chunk: ChunkIndex
    count: ChunkIndex


@message("tensor/range-reply", max_size=96)
class TensorRangeReply(Response):
    first_chunk: ChunkIndex
    count: ChunkIndex


Lookup = Callable[[bytes], PreparedTensor | None]


async def serve_tensor_request(
    stream: ByteStream,
    lookup: Lookup,
    *,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    min_rate: float = MIN_WRITE_RATE,
) -> None:
    """Answer one request read from `stream` with tensors found by checksum via `lookup`; each
    chunk must be taken at `min_rate` bytes/s at least."""
    request = await read_message(
        stream, (TensorHeaderRequest, TensorRangeRequest), idle_timeout=idle_timeout
    )
    prepared = lookup(request.checksum)
    if prepared is None:
        refusal = request.reply(ErrorResponse, code=ErrorCode.NOT_FOUND, reason="no such tensor")
        await write_message(stream, refusal, idle_timeout=idle_timeout)
    elif isinstance(request, TensorHeaderRequest):
        await write_message(
            stream,
            request.reply(TensorHeaderReply, header=prepared.header),
            idle_timeout=idle_timeout,
        )
    else:
        await _send_range(stream, prepared, request, idle_timeout, min_rate)


async def _send_range(
    stream: ByteStream,
    prepared: PreparedTensor,
    request: TensorRangeRequest,
    idle_timeout: float,
    min_rate: float,
) -> None:
    header = prepared.header
    end = request.first_chunk + request.count
    if request.count == 0 or end > header.num_chunks:
        reason = f"chunks {request.first_chunk}..{end} outside 0..{header.num_chunks}"
        refusal = request.reply(ErrorResponse, code=ErrorCode.BAD_REQUEST, reason=reason)
        await write_message(stream, refusal, idle_timeout=idle_timeout)
        return
    reply = request.reply(TensorRangeReply, first_chunk=request.first_chunk, count=request.count)
    await write_message(stream, reply, idle_timeout=idle_timeout)
    payload = memoryview(cast("Buffer", prepared.payload.numpy()))  # numpy's stubs: 3.12+ only
    for index in range(request.first_chunk, end):
        offset, length = header.chunk_span(index)
        await write_frame(
            stream,
            payload[offset : offset + length],
            max_size=header.chunk_size,
            idle_timeout=idle_timeout,
            min_rate=min_rate,
        )


async def request_header(
    stream: ByteStream,
    checksum: bytes,
    *,
    max_nbytes: int,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    allocate: Callable[[int], torch.Tensor] | None = None,
) -> TensorDownload:
    """Ask a holder for the header of tensor `checksum`; returns a ready, verified download
    (its payload buffer from `allocate`, when given: see `TensorDownload`)."""
    request = TensorHeaderRequest(checksum=checksum)
    await write_message(stream, request, idle_timeout=idle_timeout)
    reply = check_reply(
        request,
        await read_message(stream, (TensorHeaderReply, ErrorResponse), idle_timeout=idle_timeout),
    )
    return TensorDownload(
        reply.header, max_nbytes=max_nbytes, expected_checksum=checksum, allocate=allocate
    )


async def fetch_chunks(
    stream: ByteStream,
    download: TensorDownload,
    *,
    first_chunk: int,
    count: int,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> None:
    """Fetch and verify chunks [first_chunk, first_chunk + count) from one holder."""
    header = download.header
    request = TensorRangeRequest(checksum=header.checksum, first_chunk=first_chunk, count=count)
    await write_message(stream, request, idle_timeout=idle_timeout)
    reply = check_reply(
        request,
        await read_message(stream, (TensorRangeReply, ErrorResponse), idle_timeout=idle_timeout),
    )
    if (reply.first_chunk, reply.count) != (first_chunk, count):
        raise DecodeError(
            f"holder offered chunks {reply.first_chunk}+{reply.count}, asked {first_chunk}+{count}"
        )
    for index in range(first_chunk, first_chunk + count):
        buffer = download.chunk_buffer(index)
        length = await read_frame_length(
            stream, max_size=header.chunk_size, idle_timeout=idle_timeout
        )
        if length != len(buffer):
            raise DecodeError(f"chunk {index} frame is {length} bytes, expected {len(buffer)}")
        await read_exactly_into(stream, buffer, idle_timeout=idle_timeout, phase="tensor-chunk")
        download.verify_chunk(index)
