# mypy: allow-untyped-defs
"""The loops behind int8_fused.py, as plain Python that numba compiles (see that module).

Block loops index through per-block slices with `range(length)`: numba then knows every index
is non-negative and drops its negative-index wraparound, which otherwise turns loads into
gathers and defeats vectorisation.
"""

from collections.abc import Callable

import numpy as np

SIGN_OFF = 0x7FFFFFFF
TINY = 1e-30  # as in int8_blockwise: an all-zero block still gets a finite 1/scale


def block_quantizer(feedback: bool) -> Callable[..., None]:
    """The one-pass kernel, with error feedback or without: `feedback` is a closure constant, so
    numba compiles the branch away in each of the two kernels. A plain argument instead left one
    kernel that costs the feedback path about 10% more CPU (20M floats: 8.5 ms against 7.7)."""

    def kernel(x, r, ri, scales, scales_bits, values, block_size):  # pragma: no cover - compiled
        """Without feedback the caller passes x and its int32 view as `r`, `ri` (never written);
        with it, x + r is quantized in r's memory and r keeps what the receiver will not see."""
        n = x.size
        for b in range(scales.size):
            base = b * block_size
            length = min(block_size, n - base)
            src = r[base : base + length]
            if feedback:
                xb = x[base : base + length]
                for i in range(length):
                    src[i] += xb[i]
            bits = ri[base : base + length]
            top = 0
            for i in range(length):
                v = bits[i] & SIGN_OFF
                top = v if v > top else top
            scales_bits[b] = top
            scale = max(scales[b], np.float32(TINY)) / np.float32(127.0)
            scales[b] = scale
            inv = np.float32(1.0) / scale
            vb = values[base : base + length]
            if feedback:
                for i in range(length):
                    q = np.rint(src[i] * inv)
                    vb[i] = np.int32(q)
                    src[i] -= q * scale  # (x + r) - q * scale
            else:
                for i in range(length):
                    vb[i] = np.int32(np.rint(src[i] * inv))

    return kernel


def block_dequantizer() -> Callable[..., None]:
    """`out[i] = values[start + i] * scales[(start + i) // block_size]` for a range that need not
    start or end on a block boundary: one fp32 multiply per value, as the torch tiles do, so the
    result is bit-identical to theirs."""

    def kernel(scales, values, start, out, block_size):  # pragma: no cover - compiled
        n = out.size
        i = 0
        while i < n:
            b = (start + i) // block_size
            end = min((b + 1) * block_size - start, n)
            scale = scales[b]
            vb = values[start + i : start + end]
            ob = out[i:end]
            for k in range(end - i):
                ob[k] = np.float32(vb[k]) * scale
            i = end

    return kernel
