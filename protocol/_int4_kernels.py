# mypy: allow-untyped-defs
"""The loops behind int4_fused.py, as plain Python that numba compiles (as _int8_kernels.py).

Each block's absmax is taken over the IEEE bit patterns as integers (see int8_fused.py); values
are multiplied by the scale's fp32 inverse, as the torch path (int4_blockwise.py) does, so every
nibble is the one it computes, bit for bit. Pairs of values share a byte: with an even block
size no pair crosses a block, and only the tensor's last value can lack its partner.
"""

from collections.abc import Callable

import numpy as np

SIGN_OFF = 0x7FFFFFFF
TINY = 1e-30  # as in int4_blockwise
LEVELS = 7


def block_quantizer(feedback: bool) -> Callable[..., None]:
    """One pass per block: absmax, then quantize and pack while the block is in L1."""

    def kernel(x, r, ri, scales, scales_bits, packed, block_size):  # pragma: no cover - compiled
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
            scale = max(scales[b], np.float32(TINY)) / np.float32(LEVELS)
            scales[b] = scale
            inv = np.float32(1.0) / scale
            out = packed[base // 2 : (base + length + 1) // 2]
            for j in range(length // 2):
                lo = min(max(np.rint(src[2 * j] * inv), -LEVELS), LEVELS)
                hi = min(max(np.rint(src[2 * j + 1] * inv), -LEVELS), LEVELS)
                out[j] = np.uint8(np.int32(lo) + 8) | (np.uint8(np.int32(hi) + 8) << 4)
                if feedback:
                    src[2 * j] -= np.float32(lo) * scale
                    src[2 * j + 1] -= np.float32(hi) * scale
            if length % 2:
                last = min(max(np.rint(src[length - 1] * inv), -LEVELS), LEVELS)
                out[length // 2] = np.uint8(np.int32(last) + 8) | np.uint8(8 << 4)
                if feedback:
                    src[length - 1] -= np.float32(last) * scale

    return kernel


def block_dequantizer() -> Callable[..., None]:
    """`out[i] = (nibble(i) - 8) * scales[i // block_size]` for the whole tensor."""

    def kernel(scales, packed, out, block_size):  # pragma: no cover - compiled
        n = out.size
        for b in range(scales.size):
            base = b * block_size
            length = min(block_size, n - base)
            scale = scales[b]
            src = packed[base // 2 : (base + length + 1) // 2]
            ob = out[base : base + length]
            for j in range(length // 2):
                byte = np.int32(src[j])
                ob[2 * j] = np.float32((byte & 15) - 8) * scale
                ob[2 * j + 1] = np.float32((byte >> 4) - 8) * scale
            if length % 2:
                ob[length - 1] = np.float32((np.int32(src[length // 2]) & 15) - 8) * scale

    return kernel
