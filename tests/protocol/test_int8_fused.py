"""The compiled one-pass int8 encoder is the torch kernel, byte for byte, only faster."""

from __future__ import annotations

import pytest
import torch
from peertrain.protocol import codecs, int8_blockwise, int8_fused

pytestmark = pytest.mark.skipif(not int8_fused.available(), reason="numba is not installed")

SIZES = [1, 5, 127, 128, 129, 1000, 100_003]
BLOCKS = [1, 7, 128, 256]


@pytest.fixture
def fused(monkeypatch):
    """Route every size through the compiled kernel (normally only large tensors take it)."""
    monkeypatch.setattr(int8_blockwise, "FUSED_MIN_NUMEL", 0)


def _torch_path(monkeypatch, x, block_size, residual=None):
    monkeypatch.setattr(int8_blockwise, "_fused_applies", lambda *_: False)
    try:
        return _encode(x, block_size, residual)
    finally:
        monkeypatch.undo()


def _encode(x, block_size, residual=None):
    blocks = int8_blockwise.num_blocks(x.numel(), block_size)
    scales, values = torch.empty(blocks), torch.empty(x.numel(), dtype=torch.int8)
    int8_blockwise.quantize_into(x, scales, values, block_size=block_size, residual=residual)
    return scales, values


def test_only_large_tensors_take_the_compiled_kernel():
    small, large = torch.empty(1000), torch.empty(int8_blockwise.FUSED_MIN_NUMEL)
    assert not int8_blockwise._fused_applies(small, torch.empty(8), None)
    assert int8_blockwise._fused_applies(large, torch.empty(8), None)
    assert not int8_blockwise._fused_applies(large.half(), torch.empty(8), None)


@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("block_size", BLOCKS)
def test_same_scales_and_values_as_the_torch_kernel(fused, monkeypatch, numel, block_size):
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 3
    assert int8_blockwise._fused_applies(x, torch.empty(1), None)
    compiled = _encode(x, block_size)
    reference = _torch_path(monkeypatch, x, block_size)
    assert torch.equal(compiled[0], reference[0]) and torch.equal(compiled[1], reference[1])


@pytest.mark.parametrize("numel", SIZES)
def test_error_feedback_matches_the_torch_kernel(fused, monkeypatch, numel):
    gen = torch.Generator().manual_seed(7)
    x, residual = torch.randn(numel, generator=gen), torch.randn(numel, generator=gen) * 0.01
    reference_residual = residual.clone()
    compiled = _encode(x, 128, residual)
    reference = _torch_path(monkeypatch, x, 128, reference_residual)
    assert torch.equal(compiled[0], reference[0]) and torch.equal(compiled[1], reference[1])
    torch.testing.assert_close(residual, reference_residual, rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_input_is_refused(fused, bad):
    x = torch.randn(1000)
    x[517] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        codecs.encode(x, "int8", block_size=128)


def test_all_zero_blocks_decode_to_zero(fused):
    payload = codecs.encode(torch.zeros(300), "int8", block_size=128)
    decoded = codecs.decode(payload, "int8", dtype="float32", shape=(300,), block_size=128)
    assert torch.equal(decoded, torch.zeros(300))


def _torch_decode(monkeypatch, scales, values, numel, block_size):
    monkeypatch.setattr(int8_blockwise, "_fused_decode_applies", lambda *_: False)
    try:
        out = torch.empty(numel)
        int8_blockwise.dequantize_into(scales, values, out, block_size=block_size)
        return out
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("block_size", BLOCKS)
def test_compiled_decode_is_the_torch_decode_bit_for_bit(fused, monkeypatch, numel, block_size):
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 3
    scales, values = _encode(x, block_size)
    out = torch.full((numel,), float("nan"))
    assert int8_blockwise._fused_decode_applies(scales, out)
    int8_blockwise.dequantize_into(scales, values, out, block_size=block_size)
    reference = _torch_decode(monkeypatch, scales, values, numel, block_size)  # undoes `fused`
    assert torch.equal(out, reference)


@pytest.mark.parametrize(
    "start, stop", [(0, 1), (3, 5), (127, 129), (128, 256), (5, 100_003), (99_999, 100_003)]
)
def test_any_range_decodes_as_its_slice_of_the_whole(monkeypatch, start, stop):
    """Ranges that start and end mid-block, as the aggregation's chunks read a payload."""
    numel, block_size = 100_003, 128
    scales, values = _encode(torch.randn(numel, generator=torch.Generator().manual_seed(1)), 128)
    whole = _torch_decode(monkeypatch, scales, values, numel, block_size)
    out = torch.empty(stop - start)
    int8_fused.dequantize_fp32(scales, values, start, out, block_size=block_size)
    assert torch.equal(out, whole[start:stop])
    with pytest.raises(ValueError):
        int8_fused.dequantize_fp32(scales, values, numel - 1, torch.empty(2), block_size=block_size)
