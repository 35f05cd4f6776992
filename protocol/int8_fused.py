"""Fused int8 blockwise encoder: one pass, one read of the input, compiled by numba.

Why a compiled loop: the torch version (int8_blockwise.py) needs about five vectorised ops per
cache-sized tile, each a parallel region and a pass over the tile; on one core it costs about
1.8x the CPU time of a memcpy of the same tensor. Here every block of B values is read once
for its absmax and once more while still in L1 to quantize it, so encoding runs at about memory
speed (benchmarks/codec.py: 100M floats in ~24 ms against ~28 ms for the memcpy, 2026-11).

Two choices keep LLVM's vectoriser working without fast-math (which would change rounding):
  - the absmax is taken over the IEEE bit patterns as integers: clearing the sign bit and
    comparing as int orders non-negative floats exactly like the floats, and an integer max
    vectorises where a float max (with its NaN semantics) does not. NaN and Inf patterns sort
    above every finite value, so a block holding one gets a non-finite scale, which the caller
    rejects from the scales afterwards (one cheap check instead of one per value).
  - `int32(rint(x * inv))` compiles to a packed multiply, a round-to-nearest-even conversion and
    a narrowing store; the result is bit-identical to the torch kernel's magic-number rounding.

Scope: fp32 input and fp32 scales (the `int8` codec), with or without error feedback. Other
cases (fp16 scales, fp16/bf16 input) and machines without numba use the torch tiles. Decoding
has a compiled kernel too (`dequantize_fp32`, any range of a payload into a caller's buffer): a
received update is read a slice at a time by the aggregation without an fp32 copy of it.
numba compiles each kernel on first use (about a second) and caches it beside this file; loading
numba and that cache still costs ~1 s per process (3-4 s on a busy machine), so an encoder that
knows it will use the kernel calls `warm()` when it is built, not inside its first encode.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch


def available() -> bool:
    """Whether numba is importable (imported on first use: the daemon itself never needs it)."""
    return _kernels() is not None


def quantize_fp32(
    x: torch.Tensor,
    scales: torch.Tensor,
    values: torch.Tensor,
    *,
    block_size: int,
    residual: torch.Tensor | None = None,
) -> None:
    """Fill fp32 `scales` and int8 `values` from contiguous 1-D fp32 `x` (+ `residual`).

    With `residual`, quantizes `x + residual` and leaves in `residual` what the receiver will not
    see. Non-finite input produces non-finite scales; the caller checks them.
    """
    import numpy as np

    # Callers check available() first; without numba this raises TypeError, as it always did.
    fused, fused_feedback = cast("tuple[Any, Any]", _kernels())
    xs, sc, vs = x.numpy(), scales.numpy(), values.numpy()
    if residual is None:
        fused(xs, xs, xs.view(np.int32), sc, sc.view(np.int32), vs, block_size)
    else:
        rs = residual.numpy()
        fused_feedback(xs, rs, rs.view(np.int32), sc, sc.view(np.int32), vs, block_size)


def dequantize_fp32(
    scales: torch.Tensor, values: torch.Tensor, start: int, out: torch.Tensor, *, block_size: int
) -> None:
    """`out` = values[start : start + len(out)] times their blocks' fp32 `scales` (1-D, contiguous;
    `start` anywhere, not only on a block boundary). Scales must already be checked."""
    kernel = _dequantizer()
    if not 0 <= start <= start + out.numel() <= values.numel():
        raise ValueError(f"range [{start}, {start + out.numel()}) outside {values.numel()} values")
    kernel(scales.numpy(), values.numpy(), start, out.numpy(), block_size)


@functools.cache
def warm() -> None:
    """Load numba and both kernels now, for the argument types every real call passes (1-D
    C-contiguous aligned arrays): the first encode in a process then runs at kernel speed."""
    import torch

    x = torch.zeros(2 * WARM_BLOCK)
    scales = torch.empty(2)
    values = torch.empty(2 * WARM_BLOCK, dtype=torch.int8)
    quantize_fp32(x, scales, values, block_size=WARM_BLOCK)
    quantize_fp32(x, scales, values, block_size=WARM_BLOCK, residual=torch.zeros(2 * WARM_BLOCK))
    dequantize_fp32(scales, values, 1, x[: 2 * WARM_BLOCK - 1], block_size=WARM_BLOCK)


WARM_BLOCK = 128


@functools.cache
def _kernels() -> tuple[Any, Any] | None:
    """The compiled kernels; numba, numpy and LLVM load here, never when the daemon starts."""
    try:  # a dependency, but a platform without numba's wheels still encodes (torch tiles)
        import numba

        from . import _int8_kernels
    except ImportError:  # pragma: no cover - exercised only where numba is missing
        return None
    njit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
    quantizer = _int8_kernels.block_quantizer
    return njit(quantizer(feedback=False)), njit(quantizer(feedback=True))


@functools.cache
def _dequantizer() -> Any:
    """The compiled range dequantizer (a separate cache: encoders need only the two above)."""
    import numba

    from . import _int8_kernels

    njit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
    return njit(_int8_kernels.block_dequantizer())
