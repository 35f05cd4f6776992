"""int4 blockwise quantization: per block of B values one fp32 scale (absmax / 7), 4 bits a value.

Wire layout: all block scales first (fp32, little-endian), then the values packed two to a byte,
value 2k in the low nibble and 2k+1 in the high one, each stored as q + 8 for q = round(x / scale)
in [-7, 7] (a nibble of 0, q = -8, decodes too: every byte string of the right size is a valid
payload once its scales are checked). An odd count leaves the last high nibble at 8 (zero).

For outer gradients at 4 bits (Streaming DiLoCo quantizes them this low) error feedback matters
more than at 8: what rounding drops is up to half a step of absmax/7. Fp32 input with an even
block size goes through the compiled kernels of int4_fused.py (the same bits); this plain torch
over the whole tensor serves the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

LEVELS = 7  # q in [-LEVELS, LEVELS]
_TINY = 1e-30  # floor for absmax, as in int8_blockwise


def packed_nbytes(numel: int) -> int:
    return (numel + 1) // 2


def _blocks(v: torch.Tensor, block_size: int) -> torch.Tensor:
    """`v` zero-padded to whole blocks, as (blocks, block_size)."""
    import torch

    pad = -v.numel() % block_size
    return torch.nn.functional.pad(v, (0, pad)).view(-1, block_size)


def quantize_into(
    x: torch.Tensor,
    scales: torch.Tensor,
    packed: torch.Tensor,
    *,
    block_size: int,
    residual: torch.Tensor | None = None,
) -> None:
    """Quantize 1-D float `x` (plus `residual`, which then holds what was dropped) into fp32
    `scales` and uint8 `packed`; ValueError on NaN or infinite input."""
    import torch

    from . import int4_fused

    numel = x.numel()
    flat = x.reshape(-1)
    if (
        numel
        and int4_fused.applies(flat, block_size)
        and (residual is None or residual.is_contiguous())
    ):
        int4_fused.quantize_fp32(flat, scales, packed, block_size=block_size, residual=residual)
        if not torch.isfinite(scales).all():  # NaN/Inf bit patterns sort above every finite one
            raise ValueError("cannot int4-encode NaN or infinite values")
        return
    with torch.no_grad():
        v = x.float() + residual if residual is not None else x.float()
        blocks = _blocks(v, block_size)
        absmax = blocks.abs().amax(dim=1).clamp_min_(_TINY) if numel else blocks.new_empty(0)
        if numel and not torch.isfinite(absmax).all():
            raise ValueError("cannot int4-encode NaN or infinite values")
        scales.copy_(absmax / LEVELS)
        # times the fp32 inverse, not divided: as the compiled kernel (int4_fused.py) does
        q = torch.round(blocks * scales.reciprocal()[:, None]).clamp_(-LEVELS, LEVELS)
        if residual is not None:
            residual.copy_((blocks - q * scales[:, None]).reshape(-1)[:numel])
        nibbles = (q.reshape(-1)[:numel] + 8).to(torch.uint8)
        if numel % 2:
            nibbles = torch.cat([nibbles, nibbles.new_full((1,), 8)])
        packed.copy_(nibbles[0::2] | (nibbles[1::2] << 4))


def dequantize_into(
    scales: torch.Tensor, packed: torch.Tensor, out: torch.Tensor, *, block_size: int
) -> None:
    """Inverse of `quantize_into`; `scales` must already be checked finite and in range."""
    import torch

    from . import int4_fused

    numel = out.numel()
    if numel and out.is_contiguous() and int4_fused.applies(out.reshape(-1), block_size):
        int4_fused.dequantize_fp32(
            scales.float().contiguous(), packed.contiguous(), out.reshape(-1), block_size=block_size
        )
        return
    with torch.no_grad():
        nibbles = torch.stack([packed & 0xF, packed >> 4], dim=1).reshape(-1)[:numel]
        q = nibbles.float().sub_(8)
        values = _blocks(q, block_size).mul_(scales.float()[:, None])
        out.view(-1).copy_(values.reshape(-1)[:numel])
