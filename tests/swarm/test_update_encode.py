"""A member's own int8 + error-feedback encode: the compiled kernel, loaded when the encoder is
built (not inside the first round's encode), and the bytes those rounds put on the wire unchanged.
"""

from __future__ import annotations

import pytest
import torch
from peertrain.protocol import int8_blockwise, int8_fused
from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec

pytestmark = pytest.mark.skipif(not int8_fused.available(), reason="numba is not installed")

NUMEL = 100_003  # a partial last block


@pytest.fixture
def cold_kernels(monkeypatch):
    """Fresh, never-called numba dispatchers (as in a new process), large-tensor rule lowered."""
    monkeypatch.setattr(int8_blockwise, "FUSED_MIN_NUMEL", 1 << 16)
    int8_fused._kernels.cache_clear()
    int8_fused.warm.cache_clear()
    yield
    int8_fused._kernels.cache_clear()
    int8_fused.warm.cache_clear()


def _deltas(rounds: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randn(NUMEL, generator=g).mul_(1e-3) for _ in range(rounds)]


def _unwarmed_payloads(monkeypatch, deltas: list[torch.Tensor]) -> list[bytes]:
    """The bytes from before encoders warmed up: the kernel loaded inside the first encode."""
    with monkeypatch.context() as m:
        m.setattr(ProtocolCodec, "warm", lambda self, numel: None)
        encoder = ErrorFeedbackEncoder(ProtocolCodec("int8"), NUMEL)
        assert int8_fused.warm.cache_info().currsize == 0
        payloads = [bytes(encoder.encode(d)) for d in deltas]
    int8_fused._kernels.cache_clear()  # cold again for the warmed encoder
    return payloads


def test_building_the_encoder_loads_the_kernel_its_encodes_use(cold_kernels, monkeypatch):
    calls: list[int] = []
    real = int8_fused.quantize_fp32

    def counted(x, *args, **kwargs):
        calls.append(x.numel())
        return real(x, *args, **kwargs)

    encoder = ErrorFeedbackEncoder(ProtocolCodec("int8"), NUMEL)
    kernels = int8_fused._kernels()
    assert kernels is not None
    loaded = [list(k.signatures) for k in kernels]
    assert all(len(s) == 1 for s in loaded), "warm() loads both kernels, one signature each"
    monkeypatch.setattr(int8_fused, "quantize_fp32", counted)
    encoder.encode(_deltas(1)[0])
    assert calls == [NUMEL], "the member's encode takes the compiled kernel"
    assert [list(k.signatures) for k in kernels] == loaded, "and compiles nothing new"


def test_small_encoders_never_load_numba(cold_kernels):
    ErrorFeedbackEncoder(ProtocolCodec("int8"), 1000)
    assert int8_fused.warm.cache_info().currsize == 0
    ErrorFeedbackEncoder(ProtocolCodec("fp32"), NUMEL)
    assert int8_fused.warm.cache_info().currsize == 0


def test_warmed_encoder_sends_the_same_bytes_round_after_round(cold_kernels, monkeypatch):
    deltas = _deltas(3)
    reference = _unwarmed_payloads(monkeypatch, deltas)
    encoder = ErrorFeedbackEncoder(ProtocolCodec("int8"), NUMEL)
    assert [bytes(encoder.encode(d)) for d in deltas] == reference
    assert encoder.residual.abs().max() > 0  # error feedback carried a residual between rounds
