# mypy: allow-untyped-defs
"""The loops behind int8_fused.py, as plain Python that numba compiles (see that module).

Block loops index through per-block slices with `range(length)`: numba then knows every index
is non-negative and drops its negative-index wraparound, which otherwise turns loads into
gathers and defeats vectorisation.
"""

import numpy as np

SIGN_OFF = 0x7FFFFFFF
TINY = 1e-30  # as in int8_blockwise: an all-zero block still gets a finite 1/scale


def fused(x, xi, scales, scales_bits, values, block_size):  # pragma: no cover - compiled
    n = x.size
    for b in range(scales.size):
        base = b * block_size
        length = min(block_size, n - base)
        bits = xi[base : base + length]
        top = 0
        for i in range(length):
            v = bits[i] & SIGN_OFF
            top = v if v > top else top
        scales_bits[b] = top
        scale = max(scales[b], np.float32(TINY)) / np.float32(127.0)
        scales[b] = scale
        inv = np.float32(1.0) / scale
        xb = x[base : base + length]
        vb = values[base : base + length]
        for i in range(length):
            vb[i] = np.int32(np.rint(xb[i] * inv))


def fused_feedback(x, r, ri, scales, scales_bits, values, block_size):  # pragma: no cover
    n = x.size
    for b in range(scales.size):
        base = b * block_size
        length = min(block_size, n - base)
        xb = x[base : base + length]
        rb = r[base : base + length]
        for i in range(length):  # quantize x + residual, computed in the residual's memory
            rb[i] += xb[i]
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
        for i in range(length):
            q = np.rint(rb[i] * inv)
            vb[i] = np.int32(q)
            rb[i] -= q * scale  # what the receiver will not see: (x + r) - q * scale
