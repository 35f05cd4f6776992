"""Tensor codecs: how a float tensor becomes payload bytes and back.

    codec      payload                                   bytes per value
    fp32       the values, float32                       4
    fp16       the values, float16                       2
    bf16       the values, bfloat16                      2
    int8       fp32 block scales, then int8 values       1 + 4/B   (see int8_blockwise.py)
    int8-f16   fp16 block scales, then int8 values       1 + 2/B
    int4       fp32 block scales, then packed 4-bit values  1/2 + 4/B   (see int4_blockwise.py)

`payload_nbytes` is plain arithmetic, so a receiver checks a header's claimed sizes before it
allocates anything. `encode` and `decode` are synchronous and may take a second on 100M values:
call them through `trio.to_thread.run_sync`. torch is imported inside the functions, so that
importing the message layer never imports torch. Payloads are little-endian (as torch stores
them on every platform we run on). Decoding validates what it can without trusting the sender:
scales must be finite, non-negative and small enough not to overflow; float payloads must be
finite unless the caller allows otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import int4_blockwise, int8_blockwise
from .errors import DecodeError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, slots=True)
class Codec:
    name: str
    value_bits: int
    scale_bytes: int  # 0: no block scales
    wire_dtype: str  # torch dtype name of the values on the wire (int4: packed in uint8)

    def payload_nbytes(self, numel: int, block_size: int) -> int:
        scales = (
            int8_blockwise.num_blocks(numel, block_size) * self.scale_bytes
            if self.scale_bytes
            else 0
        )
        return scales + (numel * self.value_bits + 7) // 8


CODECS = {
    c.name: c
    for c in (
        Codec(name="fp32", value_bits=32, scale_bytes=0, wire_dtype="float32"),
        Codec(name="fp16", value_bits=16, scale_bytes=0, wire_dtype="float16"),
        Codec(name="bf16", value_bits=16, scale_bytes=0, wire_dtype="bfloat16"),
        Codec(name="int8", value_bits=8, scale_bytes=4, wire_dtype="int8"),
        Codec(name="int8-f16", value_bits=8, scale_bytes=2, wire_dtype="int8"),
        Codec(name="int4", value_bits=4, scale_bytes=4, wire_dtype="uint8"),
    )
}
TENSOR_DTYPES = ("float32", "float16", "bfloat16")  # what a decoded tensor may be
MAX_BLOCK_SIZE = 1 << 16


def get_codec(name: str) -> Codec:
    codec = CODECS.get(name)
    if codec is None:
        raise DecodeError(f"unknown codec {name!r}; known: {sorted(CODECS)}")
    return codec


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, name)
    return dtype


def _split(
    codec: Codec, payload: torch.Tensor, numel: int, block_size: int
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(scales, values) views of a uint8 payload, without copying."""
    n_scales = int8_blockwise.num_blocks(numel, block_size) if codec.scale_bytes else 0
    cut = n_scales * codec.scale_bytes
    scale_dtype = _torch_dtype("float32" if codec.scale_bytes == 4 else "float16")
    scales = payload[:cut].view(scale_dtype) if codec.scale_bytes else None
    return scales, payload[cut:].view(_torch_dtype(codec.wire_dtype))


def slice_payload(
    payload: torch.Tensor, codec_name: str, *, numel: int, start: int, stop: int, block_size: int
) -> torch.Tensor | None:
    """The payload of values [start, stop) of a `numel`-value payload, as a new uint8 tensor:
    the bytes of its own block scales and values, which decode to exactly those values (no
    second quantization). None when [start, stop) does not begin on a block (or a byte, for
    packed values) boundary; DecodeError when the payload is not `numel` values long."""
    import torch

    codec = get_codec(codec_name)
    if not 0 <= start < stop <= numel:
        raise ValueError(f"[{start}, {stop}) is not a slice of {numel} values")
    if payload.numel() != codec.payload_nbytes(numel, block_size):
        raise DecodeError(f"{codec.name} payload of {payload.numel()} bytes is not {numel} values")
    bits = codec.value_bits
    if (start * bits) % 8 or (codec.scale_bytes and start % block_size):
        return None
    width = codec.scale_bytes  # 0 for codecs without scales: both slices below are empty
    cut = int8_blockwise.num_blocks(numel, block_size) * width
    first, last = start // block_size, int8_blockwise.num_blocks(stop, block_size)
    scales = payload[first * width : last * width]
    values = payload[cut + start * bits // 8 : cut + (stop * bits + 7) // 8]
    out = torch.empty(scales.numel() + values.numel(), dtype=torch.uint8)
    out[: scales.numel()].copy_(scales)
    out[scales.numel() :].copy_(values)
    return out


def encode(
    tensor: torch.Tensor,
    codec_name: str,
    *,
    block_size: int = int8_blockwise.DEFAULT_BLOCK_SIZE,
    out: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """Encode a float tensor into a flat uint8 payload (into `out` if given, else new).

    `residual` (quantizing codecs: int8, int4) enables error feedback: see `error_feedback.py`.
    For fp32 tensors with the fp32 codec and no `out`, the payload is a view, not a copy.
    """
    import torch

    codec = CODECS[codec_name]
    if tensor.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"cannot encode a {tensor.dtype} tensor")
    if not 0 < block_size <= MAX_BLOCK_SIZE:
        raise ValueError(f"block size must be in 1..{MAX_BLOCK_SIZE}")
    flat = tensor.detach().reshape(-1)  # a view when contiguous
    numel = flat.numel()
    if residual is not None and (not codec.scale_bytes or residual.shape != flat.shape):
        raise ValueError("error feedback needs a quantizing codec and a residual like the tensor")
    if out is None and codec.wire_dtype == str(flat.dtype).removeprefix("torch."):
        return flat.contiguous().view(torch.uint8)
    nbytes = codec.payload_nbytes(numel, block_size)
    if out is None:
        out = torch.empty(nbytes, dtype=torch.uint8)
    elif out.dtype != torch.uint8 or out.numel() != nbytes or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous uint8 tensor of {nbytes} bytes")
    scales, values = _split(codec, out, numel, block_size)
    if scales is None:
        values.copy_(flat)
    elif codec.value_bits == 4:
        int4_blockwise.quantize_into(flat, scales, values, block_size=block_size, residual=residual)
    else:
        int8_blockwise.quantize_into(flat, scales, values, block_size=block_size, residual=residual)
    return out


def warm(codec_name: str, numel: int) -> None:
    """Load now what encoding `numel` fp32 values with this codec will need (the compiled int8
    kernel), so that an encoder built ahead of time pays for it here, not in its first encode."""
    codec = CODECS[codec_name]
    if codec.value_bits == 8 and codec.scale_bytes == 4:
        int8_blockwise.warm(numel)


def decode(
    payload: torch.Tensor,
    codec_name: str,
    *,
    dtype: str,
    shape: tuple[int, ...],
    block_size: int,
    out: torch.Tensor | None = None,
    allow_nonfinite: bool = False,
) -> torch.Tensor:
    """Decode an untrusted uint8 payload; inconsistent sizes or bad values raise DecodeError."""
    import torch

    if dtype not in TENSOR_DTYPES:
        raise DecodeError(f"unknown tensor dtype {dtype!r}")
    codec, scales, values = checked_parts(payload, codec_name, shape=shape, block_size=block_size)
    if out is None:
        out = torch.empty(shape, dtype=_torch_dtype(dtype))
    elif (
        tuple(out.shape) != tuple(shape)
        or out.dtype != _torch_dtype(dtype)
        or not out.is_contiguous()
    ):
        raise ValueError("out does not match the decoded shape/dtype")
    flat = out.view(-1)
    if scales is None:
        _copy_checked(values, flat, check=not allow_nonfinite)
    else:
        quantized = int4_blockwise if codec.value_bits == 4 else int8_blockwise
        quantized.dequantize_into(scales, values, flat, block_size=block_size)
    return out


def checked_parts(
    payload: torch.Tensor, codec_name: str, *, shape: tuple[int, ...], block_size: int
) -> tuple[Codec, torch.Tensor | None, torch.Tensor]:
    """(codec, scales, values) views of an untrusted uint8 payload, after every check that needs
    no pass over the values: codec, block size, the size against `shape`, and block scales finite
    and in range (so every int8 value then decodes to a finite float). DecodeError otherwise."""
    import torch

    codec = get_codec(codec_name)
    if not 0 < block_size <= MAX_BLOCK_SIZE:
        raise DecodeError(f"block size {block_size} out of range")
    numel = 1
    for dim in shape:
        numel *= dim
    if payload.dtype != torch.uint8 or payload.dim() != 1:
        raise ValueError("payload must be a 1-D uint8 tensor")
    if payload.numel() != codec.payload_nbytes(numel, block_size):
        raise DecodeError(
            f"{codec.name} payload of {payload.numel()} bytes does not match shape {shape}"
        )
    scales, values = _split(codec, payload, numel, block_size)
    if scales is not None:
        _check_scales(scales)
    return codec, scales, values


def _copy_checked(values: torch.Tensor, flat: torch.Tensor, *, check: bool) -> None:
    """Copy (and convert) tile by tile, checking each tile for NaN/inf while it is in cache."""
    step = int8_blockwise.TILE
    for start in range(0, flat.numel(), step):
        out_t = flat[start : start + step]
        out_t.copy_(values[start : start + step])
        if check and _value_range(out_t) is None:
            raise DecodeError("payload contains NaN or infinite values (or overflows the dtype)")


def _value_range(t: torch.Tensor) -> tuple[float, float] | None:
    """(min, max) of `t`, or None if it holds a NaN or an infinity; no full-size temporaries."""
    import math

    if t.numel() == 0:
        return (0.0, 0.0)
    lo, hi = float(t.amin()), float(t.amax())  # both propagate NaN
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _check_scales(scales: torch.Tensor) -> None:
    extent = _value_range(scales)
    if extent is None:
        raise DecodeError("int8 payload has NaN or infinite block scales")
    if extent[0] < 0 or extent[1] > int8_blockwise.FP32_SCALE_MAX:
        raise DecodeError("int8 payload has negative or oversized block scales")
