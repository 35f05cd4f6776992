"""The chunked path: same answer as one shot, never reads more than a chunk at a time."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from peertrain.swarm.aggregation import AGGREGATORS, RejectReason, build_aggregator

D = 5003  # not a multiple of any chunk size below, so the ragged last chunk is exercised


@dataclass
class Int8Source:
    """An update kept int8-quantized (per-tensor absmax scale), dequantized a slice at a time,
    as a receiver holding many large updates would do."""

    values: torch.Tensor  # int8
    scale: float
    reads: list[int] = field(default_factory=list)

    @classmethod
    def quantize(cls, update: torch.Tensor) -> Int8Source:
        scale = float(update.abs().max()) / 127
        return cls(values=(update / scale).round().to(torch.int8), scale=scale)

    @property
    def numel(self) -> int:
        return self.values.numel()

    def read(self, start: int, stop: int) -> torch.Tensor:
        self.reads.append(stop - start)
        return self.values[start:stop].float() * self.scale

    def dequantized(self) -> torch.Tensor:
        return self.values.float() * self.scale


def _updates(p: int = 9) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    centre = torch.randn(D, generator=gen)
    honest = [centre + torch.randn(D, generator=gen) for _ in range(p - 2)]
    return honest + [-10 * honest[0], 30 * torch.randn(D, generator=gen)]


OPTIONS = {"trimmed-mean": {"f": 2}, "multi-krum": {"f": 2}, "flag": {"iterations": 3, "lam": 5.0}}


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@pytest.mark.parametrize("chunk_size", [7, 1024, 1500])
def test_streaming_matches_one_shot(name, chunk_size):
    sources = [Int8Source.quantize(u) for u in _updates()]
    options = OPTIONS.get(name, {})
    expected = build_aggregator(name, **options, chunk_size=D).aggregate(
        [s.dequantized() for s in sources]
    )
    out = torch.empty(D)

    result = build_aggregator(name, **options, chunk_size=chunk_size).aggregate_streaming(
        sources, out=out
    )

    assert result.update is out
    assert torch.allclose(result.update, expected.update, rtol=1e-5, atol=1e-5)
    assert [v.reason for v in result.verdicts] == [v.reason for v in expected.verdicts]
    assert max(max(s.reads) for s in sources) <= chunk_size


def test_streaming_rejects_sources_of_the_wrong_length():
    sources = [Int8Source.quantize(u) for u in _updates()]
    sources[2] = Int8Source.quantize(_updates()[2][:-1])
    result = build_aggregator("flag").aggregate_streaming(sources)
    assert [(v.index, v.reason) for v in result.rejected] == [(2, RejectReason.SHAPE)]


def test_a_source_that_breaks_its_contract_is_our_bug_and_raises():
    class Float64Source(Int8Source):
        def read(self, start: int, stop: int) -> torch.Tensor:
            return super().read(start, stop).double()

    sources = [Float64Source.quantize(u) for u in _updates()]
    with pytest.raises(TypeError, match="expected float32"):
        build_aggregator("mean").aggregate_streaming(sources)
