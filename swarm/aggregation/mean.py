"""The plain mean: the baseline every robust rule is compared with. One Byzantine input moves it
arbitrarily far, which is what the benchmarks need it for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from peertrain.swarm.aggregation.base import Aggregator, RuleOutput
from peertrain.swarm.aggregation.streaming import (
    InputStatistics,
    UpdateSource,
    write_linear_combination,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeanAggregator(Aggregator):
    """update = (1/p) Σ g_i over the accepted inputs."""

    name: ClassVar[str] = "mean"

    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        weights = torch.full((len(sources),), 1.0 / len(sources), dtype=torch.float64)
        write_linear_combination(sources, weights, out, chunk_size=self.chunk_size)
        return RuleOutput(weights=tuple(weights.tolist()))
