"""The compiled int4 kernels give the torch path's bits exactly: the same scales, nibbles,
residuals and decoded values, for any length (odd ones, partial last blocks) and with or
without error feedback; non-finite input is refused as before."""

from __future__ import annotations

import pytest
import torch
from peertrain.protocol import int4_blockwise, int4_fused

pytestmark = pytest.mark.skipif(
    int4_fused._kernels() is None, reason="numba is not installed: the torch path serves alone"
)


def encode(x, block_size, residual, *, fused: bool, monkeypatch):
    monkeypatch.setattr(int4_fused, "applies", lambda *a: fused and a[1] % 2 == 0)
    blocks = -(-x.numel() // block_size)
    scales = torch.empty(blocks)
    packed = torch.empty(int4_blockwise.packed_nbytes(x.numel()), dtype=torch.uint8)
    r = None if residual is None else residual.clone()
    int4_blockwise.quantize_into(x, scales, packed, block_size=block_size, residual=r)
    out = torch.empty(x.numel())
    int4_blockwise.dequantize_into(scales, packed, out, block_size=block_size)
    return scales, packed, r, out


@pytest.mark.parametrize("numel", [1, 2, 127, 128, 129, 1000, 4097, 100_001])
@pytest.mark.parametrize("feedback", [False, True])
def test_the_fused_kernels_give_the_torch_paths_bits(numel, feedback, monkeypatch):
    g = torch.Generator().manual_seed(numel)
    x = torch.randn(numel, generator=g) * torch.rand(numel, generator=g) * 3
    residual = torch.randn(numel, generator=g) * 0.01 if feedback else None
    torch_path = encode(x, 128, residual, fused=False, monkeypatch=monkeypatch)
    fused = encode(x, 128, residual, fused=True, monkeypatch=monkeypatch)
    for want, got in zip(torch_path, fused, strict=True):
        if want is None:
            assert got is None
        else:
            assert torch.equal(want, got)


def test_non_finite_input_is_refused_by_the_fused_path_too():
    x = torch.randn(300)
    x[150] = float("nan")
    scales, packed = torch.empty(3), torch.empty(150, dtype=torch.uint8)
    with pytest.raises(ValueError, match="NaN or infinite"):
        int4_blockwise.quantize_into(x, scales, packed, block_size=128)
