"""Coordinate-wise rules: the median and the trimmed mean, each coordinate on its own.

Both tolerate up to f Byzantine values per coordinate (median: f < p/2; trimmed mean drops the f
largest and f smallest values of every coordinate, so needs p > 2f). Neither is a combination of
whole inputs, so they report no per-input weights. For an even count the median is the mean of
the two middle values (torch.median would return the lower one, a biased choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from peertrain.swarm.aggregation.base import Aggregator, RuleOutput
from peertrain.swarm.aggregation.errors import AggregatorConfigError
from peertrain.swarm.aggregation.streaming import (
    InputStatistics,
    UpdateSource,
    write_coordinatewise,
)


def coordinate_median(stack: torch.Tensor) -> torch.Tensor:
    """Median of each column of a (p, c) stack; the mean of the middle two when p is even."""
    p = stack.shape[0]
    if p % 2:
        return stack.median(dim=0).values
    middle = stack.sort(dim=0).values[p // 2 - 1 : p // 2 + 1]
    return middle.mean(dim=0)


def trimmed_mean(stack: torch.Tensor, trim: int) -> torch.Tensor:
    """Mean of each column of a (p, c) stack after dropping its `trim` lowest and highest values."""
    if trim == 0:
        return stack.mean(dim=0)
    ordered = stack.sort(dim=0).values
    return ordered[trim : stack.shape[0] - trim].mean(dim=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MedianAggregator(Aggregator):
    """Coordinate-wise median of the accepted inputs."""

    name: ClassVar[str] = "median"

    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        write_coordinatewise(sources, coordinate_median, out, chunk_size=self.chunk_size)
        return RuleOutput()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrimmedMeanAggregator(Aggregator):
    """Coordinate-wise mean after trimming the `f` largest and `f` smallest values."""

    name: ClassVar[str] = "trimmed-mean"
    f: int = 1

    def __post_init__(self) -> None:
        super(TrimmedMeanAggregator, self).__post_init__()
        if self.f < 0:
            raise AggregatorConfigError(f"trimmed-mean: f must be >= 0, got {self.f}")

    def min_inputs(self) -> int:
        return 2 * self.f + 1

    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        trim = self.f
        write_coordinatewise(
            sources, lambda stack: trimmed_mean(stack, trim), out, chunk_size=self.chunk_size
        )
        return RuleOutput()
