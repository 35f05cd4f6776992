"""int8 blockwise quantization kernels: per block of B values one scale (absmax / 127).

Wire layout of an int8 payload: all block scales first (fp32 or fp16, little-endian), then one
signed byte per value, `q = round(x / scale)` in [-127, 127], so decoding is `q * scale`.
The last block may be partial.

Speed (see benchmarks/codec.py). The common case (fp32 in, fp32 scales) runs in one compiled
pass (int8_fused.py, numba) at about memory speed. What follows is the torch path, used for fp16
scales, fp16/bf16 input, small tensors, and where numba is missing. A naive version makes ~6
passes over 4 bytes per value in main memory (abs, amax, mul, round, clamp, cast). Here the
tensor is walked in tiles of `TILE` values that stay in cache, so main memory sees one read of
the input and one write of the output; inside a tile the work is a handful of vectorised torch
ops on preallocated buffers:

    amax, amin             per-block extremes (no |x| temporary)
    mul(x, 1/scale)        into a cached fp32 tile
    add_(1.5 * 2**23)      the float "magic number": adding 1.5*2^23 makes the FPU round to
                           the nearest integer (ties to even) and leaves it in the low mantissa
                           bits, so the float's bit pattern is 0x4B400000 + q and its low byte
                           is q in two's complement
    copy_(int32 view)      int32 -> int8 narrowing keeps that low byte (a fast, vectorised
                           cast; torch's float -> int8 cast is several times slower)

Threads: each op above is parallel over torch's intra-op threads, about 5 parallel regions per
tile. On an oversubscribed host (other processes on every core) OpenMP's default spin-waiting
makes every region hostage to the scheduler and encoding slows several-fold while a one-region
memcpy barely notices; OMP_WAIT_POLICY=PASSIVE in the process environment, or one torch thread,
keeps it steady (about 1.8x the CPU time of a memcpy on one core, measured here).

Non-finite input is detected once, from the scales, after the loop (a per-tile check costs
a sync per tile). Error feedback (`residual=`) is fused into the same tile loop: the residual
is added before quantizing and replaced by what the receiver will *not* see, computed from
the scale exactly as stored (fp16-rounded when the scales are fp16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import int8_fused

if TYPE_CHECKING:
    import torch

DEFAULT_BLOCK_SIZE = 128
TILE = 1 << 20  # values per tile: 4 MiB of fp32; measured best of 2^16..2^22 (L3-resident)
_MAGIC = 1.5 * 2**23
_TINY = 1e-30  # floor for absmax: an all-zero block still gets a finite 1/absmax
FP32_SCALE_MAX = 3.0e38 / 128  # larger scales could decode to inf


def num_blocks(numel: int, block_size: int) -> int:
    return -(-numel // block_size)


def quantize_into(
    x: torch.Tensor,
    scales: torch.Tensor,
    values: torch.Tensor,
    *,
    block_size: int,
    residual: torch.Tensor | None = None,
) -> None:
    """Quantize 1-D float `x` into `scales` (n_blocks, fp32/fp16) and `values` (numel, int8).

    With `residual` (1-D fp32, like `x`), quantize `x + residual` and store the new residual.
    Raises ValueError on NaN/Inf input or (fp16 scales) a block too large for fp16; `values`,
    `scales` and `residual` then hold garbage.
    """
    import torch

    if _fused_applies(x, scales, residual):
        int8_fused.quantize_fp32(x, scales, values, block_size=block_size, residual=residual)
        _check_encoded_scales(scales)
        return
    numel = x.numel()
    full = numel // block_size
    with torch.no_grad():
        if full:
            cut = full * block_size
            step = max(1, TILE // block_size)
            work = _Work(min(full, step), block_size, scales.dtype)
            xv = x[:cut].view(full, block_size)
            vv = values[:cut].view(full, block_size)
            rv = None if residual is None else residual[:cut].view(full, block_size)
            for s in range(0, full, step):
                e = min(full, s + step)
                rt = None if rv is None else rv[s:e]
                _quantize_tile(xv[s:e], scales[s:e], vv[s:e], rt, work)
        if numel > full * block_size:  # the partial last block
            tail = slice(full * block_size, numel)
            rt = None if residual is None else residual[tail].view(1, -1)
            work = _Work(1, numel - full * block_size, scales.dtype)
            _quantize_tile(x[tail].view(1, -1), scales[full:], values[tail].view(1, -1), rt, work)
        _check_encoded_scales(scales)


# The compiled kernel pays for itself on large updates only: loading numba and LLVM costs ~160 MB
# of RSS and ~1 s once per process, so nodes training small models never load it.
FUSED_MIN_NUMEL = 1 << 22


def warm(numel: int) -> None:
    """Load the compiled kernel now if encoding `numel` fp32 values will use it, so that an
    encoder built ahead of its first encode (a DiLoCo member at join) does not pay numba's load
    inside that encode, on the round's critical path."""
    if numel >= FUSED_MIN_NUMEL and int8_fused.available():
        int8_fused.warm()


def _fused_applies(x: torch.Tensor, scales: torch.Tensor, residual: torch.Tensor | None) -> bool:
    """The compiled one-pass kernel covers the common large case: fp32 in, fp32 scales."""
    import torch

    tensors = (x, scales) if residual is None else (x, scales, residual)
    return (
        x.numel() >= FUSED_MIN_NUMEL
        and int8_fused.available()
        and all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors)
        and not any(t.requires_grad for t in tensors)
    )


class _Work:
    """Cache-sized scratch buffers reused by every tile of one call."""

    def __init__(self, blocks: int, block_size: int, scale_dtype: torch.dtype) -> None:
        import torch

        self.blocks = blocks
        self.tmp = torch.empty(blocks, block_size)
        self.hi = torch.empty(blocks)
        self.lo = torch.empty(blocks)
        self.inv = torch.empty(blocks)
        self.scale32 = torch.empty(blocks) if scale_dtype != torch.float32 else None

    def take(self, n: int) -> _Work:
        """These buffers cut to `n` blocks (the last tile may be shorter)."""
        if n == self.blocks:
            return self
        part = object.__new__(_Work)
        for name, buf in vars(self).items():
            setattr(
                part, name, buf[:n] if hasattr(buf, "shape") else n if name == "blocks" else buf
            )
        return part


def _quantize_tile(
    xt: torch.Tensor,
    scales_t: torch.Tensor,
    values_t: torch.Tensor,
    residual_t: torch.Tensor | None,
    work: _Work,
) -> None:
    import torch

    w = work.take(xt.shape[0])
    if xt.dtype != torch.float32:
        xt = xt.float()
    if residual_t is not None:  # quantize x + residual, computed in the residual's own memory
        xt = residual_t.add_(xt)
    torch.amax(xt, dim=1, out=w.hi)
    torch.amin(xt, dim=1, out=w.lo)
    absmax = torch.maximum(w.hi, w.lo.neg_(), out=w.hi).clamp_min_(_TINY)
    if w.scale32 is None:  # fp32 scales: write them in place
        scale = torch.div(absmax, 127.0, out=scales_t)
    else:  # fp16 scales: the receiver multiplies by the rounded value, so use it too
        scales_t.copy_(torch.div(absmax, 127.0, out=w.scale32))
        scale = w.scale32.copy_(scales_t)
    torch.reciprocal(scale, out=w.inv)
    torch.mul(xt, w.inv[:, None], out=w.tmp).add_(_MAGIC)
    values_t.copy_(w.tmp.view(torch.int32))
    if residual_t is not None:  # residual = (x + residual) - q * scale; t - MAGIC == q exactly
        residual_t.addcmul_(w.tmp.sub_(_MAGIC), scale[:, None], value=-1.0)


def _check_encoded_scales(scales: torch.Tensor) -> None:
    import math

    if scales.numel() == 0:
        return
    top = float(scales.amax())  # NaN propagates; a NaN or inf input makes a NaN or inf scale
    if not math.isfinite(top):
        raise ValueError("cannot int8-encode NaN or infinite values (or fp16 scales overflowed)")


def dequantize_into(
    scales: torch.Tensor, values: torch.Tensor, out: torch.Tensor, *, block_size: int
) -> None:
    """Inverse of `quantize_into`; `scales` must already be checked finite and in range."""
    import torch

    numel = out.numel()
    if _fused_decode_applies(scales, out):
        int8_fused.dequantize_fp32(scales, values, 0, out.view(-1), block_size=block_size)
        return
    full = numel // block_size
    with torch.no_grad():
        if full:
            cut = full * block_size
            ov, vv = out[:cut].view(full, block_size), values[:cut].view(full, block_size)
            sv, step = scales[:full], max(1, TILE // block_size)
            for s in range(0, full, step):
                _dequantize_tile(sv[s : s + step], vv[s : s + step], ov[s : s + step])
        if numel > full * block_size:
            tail = slice(full * block_size, numel)
            _dequantize_tile(scales[full:], values[tail].view(1, -1), out[tail].view(1, -1))


def _fused_decode_applies(scales: torch.Tensor, out: torch.Tensor) -> bool:
    """One compiled pass (no per-tile temporaries) for large fp32 outputs of fp32 scales."""
    import torch

    return (
        out.numel() >= FUSED_MIN_NUMEL
        and out.dtype == torch.float32
        and scales.dtype == torch.float32
        and out.is_contiguous()
        and int8_fused.available()
    )


def _dequantize_tile(scales_t: torch.Tensor, values_t: torch.Tensor, out_t: torch.Tensor) -> None:
    import torch

    scale = scales_t.float()[:, None]
    if out_t.dtype == torch.float32:
        out_t.copy_(values_t).mul_(scale)
    else:
        out_t.copy_(values_t.float().mul_(scale))
