"""int8 blockwise quantization kernels: per block of B values one scale (absmax / 127).

Wire layout of an int8 payload: all block scales first (fp32 or fp16, little-endian), then one
byte per value. A value byte `u` stores `q + 128` with `q = round(x / scale)` in [-127, 127]
("offset binary"), so decoding is `(u - 128) * scale`. The last block may be partial.

Speed (see benchmarks/codec.py). A naive version makes ~6 passes over 4 bytes per value in
main memory (abs, amax, mul, round, clamp, cast). Here the tensor is walked in tiles of
`TILE` values that stay in cache, so main memory sees one read of the input and one write of
the output; inside a tile the work is a handful of vectorised torch ops on preallocated buffers:

    amax, amin             per-block extremes (no |x| temporary)
    mul(x, 127/absmax)     into a cached fp32 tile
    add_(1.5 * 2**23 + 128)  the float "magic number": adding 1.5*2^23 makes the FPU round to
                           the nearest integer and leaves it in the low mantissa bits, so the
                           low byte of the float's bit pattern *is* q + 128
    copy_(int32 view)      int32 -> uint8 narrowing keeps that low byte (a fast, vectorised
                           cast; torch's float -> uint8 cast is ~8x slower)

Error feedback (`residual=`) is fused into the same tile loop: the residual is added before
quantizing and replaced by what the receiver will *not* see, computed from the scale exactly
as stored (fp16-rounded when the scales are fp16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEFAULT_BLOCK_SIZE = 128
TILE = 1 << 18  # values per tile: 1 MiB of fp32, a few of them fit in L2/L3
_MAGIC = 1.5 * 2**23
_TINY = 1e-30  # floor for absmax: an all-zero block still gets a finite 1/absmax
FP16_MAX = 65504.0
FP32_SCALE_MAX = 3.0e38 / 128  # larger scales could decode to inf


def num_blocks(numel: int, block_size: int) -> int:
    return -(-numel // block_size)


def _tiles(n_blocks: int, block_size: int):
    step = max(1, TILE // block_size)
    for start in range(0, n_blocks, step):
        yield start, min(n_blocks, start + step)


def quantize_into(
    x: torch.Tensor,
    scales: torch.Tensor,
    values: torch.Tensor,
    *,
    block_size: int,
    residual: torch.Tensor | None = None,
) -> None:
    """Quantize 1-D float `x` into `scales` (n_blocks, fp32/fp16) and `values` (numel, uint8).

    With `residual` (1-D fp32, like `x`), quantize `x + residual` and store the new residual.
    Raises ValueError on NaN/Inf input or (fp16 scales) a block too large for fp16.
    """
    import torch

    numel = x.numel()
    full = numel // block_size
    with torch.no_grad():
        work = _Work(min(numel, max(TILE, block_size)), block_size)
        if full:
            xv, vv = x[: full * block_size].view(full, block_size), values[: full * block_size]
            rv = None if residual is None else residual[: full * block_size].view(full, block_size)
            for s, e in _tiles(full, block_size):
                _quantize_tile(
                    xv[s:e],
                    scales[s:e],
                    vv.view(full, block_size)[s:e],
                    None if rv is None else rv[s:e],
                    work,
                )
        if numel > full * block_size:  # the partial last block
            tail = slice(full * block_size, numel)
            rt = None if residual is None else residual[tail].view(1, -1)
            _quantize_tile(
                x[tail].view(1, -1),
                scales[full:],
                values[tail].view(1, -1),
                rt,
                _Work(numel - full * block_size, numel - full * block_size),
            )


class _Work:
    """Cache-sized scratch buffers reused by every tile of one call."""

    def __init__(self, tile_values: int, block_size: int) -> None:
        import torch

        blocks = max(1, tile_values // block_size)
        self.tmp = torch.empty(blocks, block_size)
        self.tmp2 = torch.empty(blocks, block_size)
        self.hi = torch.empty(blocks)
        self.lo = torch.empty(blocks)
        self.inv = torch.empty(blocks)


def _quantize_tile(xt, scales_t, values_t, residual_t, work: _Work) -> None:
    import torch

    n = xt.shape[0]
    tmp, hi, lo, inv = work.tmp[:n], work.hi[:n], work.lo[:n], work.inv[:n]
    if xt.dtype != torch.float32:
        xt = xt.float()
    if residual_t is not None:
        xt = torch.add(xt, residual_t, out=work.tmp2[:n])
    torch.amax(xt, dim=1, out=hi)
    torch.amin(xt, dim=1, out=lo)
    absmax = torch.maximum(hi, lo.neg_(), out=hi)
    if not bool(torch.isfinite(absmax).all()):
        raise ValueError("cannot int8-encode NaN or infinite values")
    absmax.clamp_min_(_TINY)
    scale = torch.div(absmax, 127.0, out=lo)
    if scales_t.dtype == torch.float16:
        if bool((scale > FP16_MAX).any()):
            raise ValueError("values too large for fp16 scales; use fp32 scales")
        scales_t.copy_(scale)
        scale = scales_t.float()  # what the receiver will multiply by
    else:
        scales_t.copy_(scale)
    torch.div(127.0, absmax, out=inv)
    torch.mul(xt, inv[:, None], out=tmp).add_(_MAGIC + 128.0)
    values_t.copy_(tmp.view(torch.int32))
    if residual_t is not None:  # residual = (x + residual) - dequantized
        tmp.sub_(_MAGIC + 128.0).mul_(scale[:, None])
        torch.sub(xt, tmp, out=residual_t)


def dequantize_into(
    scales: torch.Tensor, values: torch.Tensor, out: torch.Tensor, *, block_size: int
) -> None:
    """Inverse of `quantize_into`; `scales` must already be checked finite and in range."""
    import torch

    numel = out.numel()
    full = numel // block_size
    with torch.no_grad():
        if full:
            ov = out[: full * block_size].view(full, block_size)
            vv = values[: full * block_size].view(full, block_size)
            for s, e in _tiles(full, block_size):
                _dequantize_tile(scales[s:e], vv[s:e], ov[s:e])
        if numel > full * block_size:
            tail = slice(full * block_size, numel)
            _dequantize_tile(scales[full:], values[tail].view(1, -1), out[tail].view(1, -1))


def _dequantize_tile(scales_t, values_t, out_t) -> None:
    import torch

    scale = scales_t.float()[:, None]
    if out_t.dtype == torch.float32:
        out_t.copy_(values_t)
        out_t.sub_(128.0).mul_(scale)
    else:
        out_t.copy_(values_t.float().sub_(128.0).mul_(scale))
