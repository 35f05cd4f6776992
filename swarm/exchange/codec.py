"""Turning a pseudo-gradient into wire bytes and back, with error feedback for int8.

The codecs themselves (fp32, fp16, int8 blockwise, and error feedback fused into the int8
quantizer) belong to `peertrain.protocol.codecs`; this module only adapts them to DiLoCo. A member
encodes Δ + residual and keeps what quantization dropped as the next residual; it decodes peers'
payloads against the size the model dictates. Payloads are the codec's bytes only: codec name and
block size come from the run manifest, and the update gossip adds its own header and checksum.

What a member aggregates is always the *decoded* payload, its own included, so that every member
aggregates identical inputs and ends the round with an identical state hash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from peertrain.protocol import codecs
from peertrain.protocol.int8_blockwise import DEFAULT_BLOCK_SIZE
from peertrain.swarm.aggregation.streaming import TensorSource, UpdateSource
from peertrain.swarm.exchange import payload_source
from peertrain.swarm.exchange.payload_source import QuantizedSource
from peertrain.swarm.models.config import ConfigError

# A payload is any bytes-like object. Ours are writable memoryviews over the encoder's output
# tensor: 100M int8 values are not copied into a `bytes` on the way to the wire (nor back out on
# decode), which on the update round's critical path saves a copy of ~100 MB per member.
Payload = bytes | bytearray | memoryview


def payload_tensor(payload: Payload) -> torch.Tensor:
    """A flat uint8 tensor over `payload`: no copy when the buffer is writable."""
    if not len(payload):
        return torch.empty(0, dtype=torch.uint8)
    if isinstance(payload, bytes) or (isinstance(payload, memoryview) and payload.readonly):
        payload = bytearray(payload)  # torch wants a writable buffer; we never write through it
    return torch.frombuffer(payload, dtype=torch.uint8)


class UpdateCodec(Protocol):
    """Flat fp32 vector ↔ bytes; `decode` raises `DecodeError` unless it gets `numel` finite values.

    `encode(values, residual=r)` (only when `supports_error_feedback`) encodes values + r and
    replaces r in place by what the receiver will not see.
    """

    name: str
    supports_error_feedback: bool

    def encode(
        self,
        values: torch.Tensor,
        *,
        residual: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> Payload: ...

    def decode(self, payload: Payload, numel: int) -> torch.Tensor: ...

    def source(self, payload: Payload, numel: int) -> UpdateSource:
        """The payload as an aggregation input, checked as `decode` checks it (DecodeError)."""
        ...

    def payload_bytes(self, numel: int) -> int: ...

    def warm(self, numel: int) -> None:
        """Load what encoding `numel` values needs now (called when an encoder is built)."""


class ProtocolCodec:
    """One of `peertrain.protocol.codecs.CODECS` (fp32, fp16, bf16, int8, int8-f16)."""

    def __init__(self, name: str, *, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if name not in codecs.CODECS:
            raise ConfigError(f"unknown codec {name!r}; choose one of {', '.join(codecs.CODECS)}")
        self.name = name
        self.block_size = block_size
        self.supports_error_feedback = codecs.CODECS[name].scale_bytes > 0

    def encode(
        self,
        values: torch.Tensor,
        *,
        residual: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> Payload:
        """The payload, written into `out` (uint8, `payload_bytes` long) or a fresh tensor."""
        if out is None:
            out = torch.empty(self.payload_bytes(values.numel()), dtype=torch.uint8)
        codecs.encode(values, self.name, block_size=self.block_size, residual=residual, out=out)
        return memoryview(out.numpy())

    def decode(self, payload: Payload, numel: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """The `numel` values, into `out` (contiguous fp32) when given."""
        return codecs.decode(
            payload_tensor(payload),
            self.name,
            dtype="float32",
            shape=(numel,),
            block_size=self.block_size,
            out=out,
        )

    def slice(self, payload: Payload, numel: int, start: int, stop: int) -> Payload:
        """The payload of values [start, stop) of a payload of `numel` values: its own bytes
        where the slice starts on the codec's blocks (it decodes to exactly those values), else
        decoded and encoded again."""
        piece = codecs.slice_payload(
            payload_tensor(payload),
            self.name,
            numel=numel,
            start=start,
            stop=stop,
            block_size=self.block_size,
        )
        if piece is None:
            return self.encode(self.decode(payload, numel)[start:stop].contiguous())
        return memoryview(piece.numpy())

    def source(self, payload: Payload, numel: int) -> UpdateSource:
        """int8: read in place, a chunk at a time (payload_source.py); others: decoded whole."""
        if payload_source.applies(self.name, numel):
            return QuantizedSource(payload_tensor(payload), numel, block_size=self.block_size)
        return TensorSource(self.decode(payload, numel))

    def payload_bytes(self, numel: int) -> int:
        return codecs.CODECS[self.name].payload_nbytes(numel, self.block_size)

    def warm(self, numel: int) -> None:
        codecs.warm(self.name, numel)


class ErrorFeedbackEncoder:
    """Encodes pseudo-gradients, carrying the quantization residual from round to round.

    Error feedback is on when asked for and the codec supports it (int8); with a lossless codec the
    residual stays zero. The residual is member-local: it is checkpointed with the member but never
    part of the shared state hash. Built ahead of the first round (a member is built when it joins,
    in a worker thread), it loads the codec's compiled kernel then: that load (~1 s, numba) used
    to land inside the first round's encode.

    `allocate(nbytes)`, when set, gives the uint8 tensor each payload is written into: the node
    sets its receive-buffer pool (node/net/receive_buffers.py), so a round's payload reuses the
    memory of an old one nobody reads any more instead of faulting in 100 MB anew (~25 000 page
    faults, 2/3 of the kernel's own time at 100M values).
    """

    def __init__(self, codec: UpdateCodec, numel: int, *, enabled: bool = True) -> None:
        self.codec = codec
        self.enabled = enabled and codec.supports_error_feedback
        self.residual = torch.zeros(numel, dtype=torch.float32)
        self.allocate: Callable[[int], torch.Tensor] | None = None
        codec.warm(numel)

    def encode(self, delta: torch.Tensor) -> Payload:
        out = (
            None
            if self.allocate is None
            else self.allocate(self.codec.payload_bytes(delta.numel()))
        )
        return self.codec.encode(delta, residual=self.residual if self.enabled else None, out=out)
