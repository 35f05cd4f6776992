"""Fused int4 blockwise encoder and decoder: one pass over the input, compiled by numba, the
same bits as the torch path (int4_blockwise.py), which stays for other dtypes, odd block sizes
and machines without numba. Why compiled loops: see int8_fused.py; the torch int4 path makes a
dozen passes (pad, abs, amax, scale, round, clamp, residual, shift, or, copies). Measured
(benchmarks/codec.py, 100M floats, load 0.4): encode 0.64 → 13.0 GB/s, decode 1.35 → 17.7 GB/s,
where int8 encodes at 22.2 GB/s: the pairs packed into bytes keep the loop from vectorising as
int8's does."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch


def applies(x: torch.Tensor, block_size: int) -> bool:
    """Fp32 contiguous input, an even block size (no byte spans two blocks), numba present."""
    import torch

    return (
        x.dtype == torch.float32
        and x.is_contiguous()
        and block_size % 2 == 0
        and _kernels() is not None
    )


def quantize_fp32(
    x: torch.Tensor,
    scales: torch.Tensor,
    packed: torch.Tensor,
    *,
    block_size: int,
    residual: torch.Tensor | None = None,
) -> None:
    """Fill fp32 `scales` and uint8 `packed` from 1-D fp32 `x` (+ `residual`, which then holds
    what was dropped). Non-finite input gives non-finite scales; the caller checks them."""
    import numpy as np

    quantizer, quantizer_feedback, _ = cast("tuple[Any, Any, Any]", _kernels())
    xs, sc, ps = x.numpy(), scales.numpy(), packed.numpy()
    if residual is None:  # without feedback the kernel only reads its `r` buffer: x itself
        quantizer(xs, xs, xs.view(np.int32), sc, sc.view(np.int32), ps, block_size)
    else:
        rs = residual.numpy()
        quantizer_feedback(xs, rs, rs.view(np.int32), sc, sc.view(np.int32), ps, block_size)


def dequantize_fp32(
    scales: torch.Tensor, packed: torch.Tensor, out: torch.Tensor, *, block_size: int
) -> None:
    """`out` (1-D fp32) from checked fp32 `scales` and `packed` nibbles."""
    _, _, dequantizer = cast("tuple[Any, Any, Any]", _kernels())
    dequantizer(scales.numpy(), packed.numpy(), out.numpy(), block_size)


@functools.cache
def _kernels() -> tuple[Any, Any, Any] | None:
    try:  # a dependency, but a platform without numba's wheels still encodes (torch)
        import numba

        from . import _int4_kernels
    except ImportError:  # pragma: no cover - exercised only where numba is missing
        return None
    njit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
    quantizer = _int4_kernels.block_quantizer
    return (
        njit(quantizer(feedback=False)),
        njit(quantizer(feedback=True)),
        njit(_int4_kernels.block_dequantizer()),
    )
