"""The SWARM pipeline protocol: one request per stream, control message first, then raw tensors.

    client                                          stage server
    StageCall | GradientsRequest | StateRequest  ->
      + one raw frame per attached tensor
                                                  <- StageReply | GradientsReply | StateReply
                                                     | ErrorResponse
                                                     + one raw frame per attached tensor

Tensors never go through msgpack (docs/design.md §3): a message carries one `TensorHeader` per
attached tensor (codec, shape, block size, payload size, blake3 digests) and the payloads follow
as length-prefixed frames, read straight into a buffer preallocated from the checked header
(`TensorDownload`), each verified against its digest. A boundary tensor is small (rows × width),
so each fits one chunk; a stage's state may take several. Limits: a header whose payload exceeds
the receiver's `max_nbytes` is refused before anything is allocated. Labels of a microbatch are a
short list of ints in the message (control-sized, not a tensor; a language model's (rows, seq)
labels go flat, at most MAX_ROWS of them, and the last stage reshapes them).
"""

from __future__ import annotations

from typing import Annotated

import torch
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.framing import read_exactly_into, read_frame_length, write_frame
from peertrain.protocol.ids import protocol_id
from peertrain.protocol.messages import Request, Response, message
from peertrain.protocol.schema import IntRange, MaxLen
from peertrain.protocol.tensors import PreparedTensor, TensorDownload, TensorHeader, prepare_encoded

from .boundary import BoundaryTensor

PIPELINE = protocol_id("pipeline", "1.0.0")
MAX_ROWS = 4096
MAX_BOUNDARY_BYTES = 64 << 20  # one activation or gradient of a microbatch
MAX_STATE_BYTES = 1 << 30
OPS = ("forward", "backward", "loss")
_HEADER_SIZE = TensorHeader.wire_max_size

Headers = Annotated[tuple[TensorHeader, ...], MaxLen(2)]
RunId = Annotated[str, MaxLen(128)]
Stage = Annotated[int, IntRange(0, 1024)]
Round = Annotated[int, IntRange(0, 2**62)]


@message("pipeline/stage-call", max_size=2 * _HEADER_SIZE + 64 * 1024)
class StageCall(Request):
    run: RunId
    op: Annotated[str, MaxLen(16)]
    stage: Stage
    tensors: Headers  # forward: (x,); backward: (x, grad_out); loss: (x,)
    targets: Annotated[tuple[Annotated[int, IntRange(0, 2**31)], ...], MaxLen(MAX_ROWS)] = ()

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {OPS}")


@message("pipeline/stage-reply", max_size=_HEADER_SIZE + 256)
class StageReply(Response):
    loss: float = 0.0
    tensors: Headers = ()  # forward: (y,); backward/loss: (grad_x,) or () at stage 0


@message("pipeline/gradients-request", max_size=256)
class GradientsRequest(Request):
    run: RunId
    stage: Stage
    round: Round


@message("pipeline/gradients-reply", max_size=_HEADER_SIZE + 320)
class GradientsReply(Response):
    samples: Annotated[int, IntRange(0, 2**40)]
    tensors: Headers  # (flat sample-weighted gradient sum,)
    # the replier's stage-state checksum after round `round - 1` (swarm/pipeline/drift.py);
    # empty when it does not have it (not there yet, or long past)
    checksum: Annotated[bytes, MaxLen(32)] = b""


@message("pipeline/state-request", max_size=256)
class StateRequest(Request):
    run: RunId
    stage: Stage


@message("pipeline/state-reply", max_size=_HEADER_SIZE + 256)
class StateReply(Response):
    round: Round  # averaging rounds the stage has applied
    adam_step: Annotated[int, IntRange(0, 2**40)]
    tensors: Headers  # (flat [params | exp_avg | exp_avg_sq],)


def prepare_boundary(boundary: BoundaryTensor) -> PreparedTensor:
    return prepare_encoded(
        "boundary",
        boundary.payload,
        dtype="float32",
        shape=boundary.shape,
        codec=boundary.codec,
        block_size=boundary.block_size,
    )


def boundary_of(header: TensorHeader, payload: torch.Tensor) -> BoundaryTensor:
    return BoundaryTensor(
        codec=header.codec, shape=tuple(header.shape), block_size=header.block_size, payload=payload
    )


def prepare_flat(name: str, flat: torch.Tensor) -> PreparedTensor:
    from peertrain.protocol import codecs

    return prepare_encoded(
        name,
        codecs.encode(flat, "fp32"),
        dtype="float32",
        shape=tuple(flat.shape),
        codec="fp32",
        block_size=1,
    )


async def write_payloads(
    stream, prepared: tuple[PreparedTensor, ...], *, idle_timeout: float
) -> None:
    """The raw frames of `prepared`, chunk by chunk, after their message went out."""
    for item in prepared:
        payload = memoryview(item.payload.numpy())
        for index in range(item.header.num_chunks):
            offset, length = item.header.chunk_span(index)
            await write_frame(
                stream,
                payload[offset : offset + length],
                max_size=item.header.chunk_size,
                idle_timeout=idle_timeout,
            )


async def read_payloads(
    stream, headers: tuple[TensorHeader, ...], *, max_nbytes: int, idle_timeout: float
) -> list[torch.Tensor]:
    """Read and verify the payloads announced by `headers` (checked before any allocation)."""
    out = []
    for header in headers:
        download = TensorDownload(header, max_nbytes=max_nbytes)
        for index in range(header.num_chunks):
            buffer = download.chunk_buffer(index)
            length = await read_frame_length(
                stream, max_size=header.chunk_size, idle_timeout=idle_timeout
            )
            if length != len(buffer):
                raise DecodeError(f"chunk {index} frame is {length} bytes, expected {len(buffer)}")
            await read_exactly_into(
                stream, buffer, idle_timeout=idle_timeout, phase="pipeline-tensor"
            )
            download.verify_chunk(index)
        out.append(download.payload)
    return out
