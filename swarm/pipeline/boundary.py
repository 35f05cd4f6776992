"""Tensors crossing a stage boundary: activations forward, their gradients backward.

A `BoundaryTensor` is what a transport carries: a codec name, a shape and a flat uint8 payload
(protocol/codecs.py). A server decodes its input and encodes its output with the codec the trainer
asked for, so the trainer shuttles payloads from one stage to the next without decoding them, and
int8 blockwise compression (1 + 4/128 bytes per value instead of 4) is one switch. Decoding goes
through the codec's untrusted-input checks, so a garbled payload raises DecodeError instead of
poisoning a stage's gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from peertrain.protocol import codecs
from peertrain.protocol.int8_blockwise import DEFAULT_BLOCK_SIZE

BOUNDARY_CODECS = ("fp32", "fp16", "int8")


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundaryTensor:
    codec: str
    shape: tuple[int, ...]
    block_size: int
    payload: torch.Tensor  # 1-D uint8

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.payload.numel()


def pack(
    tensor: torch.Tensor, codec: str = "fp32", *, block_size: int = DEFAULT_BLOCK_SIZE
) -> BoundaryTensor:
    if codec not in BOUNDARY_CODECS:
        raise ValueError(f"boundary codec must be one of {BOUNDARY_CODECS}, not {codec!r}")
    payload = codecs.encode(tensor.detach().float().contiguous(), codec, block_size=block_size)
    return BoundaryTensor(
        codec=codec, shape=tuple(tensor.shape), block_size=block_size, payload=payload.clone()
    )


def unpack(boundary: BoundaryTensor) -> torch.Tensor:
    return codecs.decode(
        boundary.payload,
        boundary.codec,
        dtype="float32",
        shape=boundary.shape,
        block_size=boundary.block_size,
    )
