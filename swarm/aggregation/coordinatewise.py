"""Coordinate-wise rules: the median and the trimmed mean, each coordinate on its own.

Both tolerate up to f Byzantine values per coordinate (median: f < p/2; trimmed mean drops the f
largest and f smallest values of every coordinate, so needs p > 2f). Neither is a combination of
whole inputs, so they report no per-input weights. For an even count the median is the mean of
the two middle values (torch.median would return the lower one, a biased choice).

Order statistics come from a sorting network (Batcher's odd-even merge sort) applied to whole
rows: each comparator is one elementwise min and max over a block of coordinates. For the small p
of a group this is about 10× faster than `torch.sort(dim=0)` on CPU (which sorts every column on
its own), and the network is pruned to the comparators that feed the ranks actually needed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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


@functools.lru_cache(maxsize=64)
def sorting_network(p: int) -> tuple[tuple[int, int], ...]:
    """Comparators (i < j) of Batcher's odd-even merge sort for p inputs.

    Built for the next power of two; comparators touching an index ≥ p are dropped, which is
    exact: those positions act as +inf padding and such a comparator would never move anything.
    """
    n = 1 << max(p - 1, 0).bit_length()
    comparators = []
    size = 1
    while size < n:
        step = size
        while step >= 1:
            for base in range(step % size, n - step, 2 * step):
                for i in range(min(step, n - base - step)):
                    lo, hi = base + i, base + i + step
                    if lo // (2 * size) == hi // (2 * size):
                        comparators.append((lo, hi))
            step //= 2
        size *= 2
    return tuple((lo, hi) for lo, hi in comparators if hi < p)


@functools.lru_cache(maxsize=256)
def _network_for_ranks(p: int, ranks: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The comparators of `sorting_network(p)` that the outputs at `ranks` depend on."""
    needed, kept = set(ranks), []
    for lo, hi in reversed(sorting_network(p)):
        if lo in needed or hi in needed:
            kept.append((lo, hi))
            needed |= {lo, hi}
    return tuple(reversed(kept))


def order_statistics(rows: Sequence[torch.Tensor], ranks: tuple[int, ...]) -> list[torch.Tensor]:
    """For each rank k, the k-th smallest of the p rows' values at every coordinate.

    The rows are not modified (each comparator makes new tensors)."""
    rows = list(rows)
    for lo, hi in _network_for_ranks(len(rows), ranks):
        rows[lo], rows[hi] = torch.minimum(rows[lo], rows[hi]), torch.maximum(rows[lo], rows[hi])
    return [rows[k] for k in ranks]


def coordinate_median(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """Coordinate-wise median of p equal-length rows; the mean of the middle two when p is even."""
    p = len(rows)
    if p % 2:
        return order_statistics(rows, (p // 2,))[0]
    low, high = order_statistics(rows, (p // 2 - 1, p // 2))
    return (low + high) / 2


def trimmed_mean(rows: Sequence[torch.Tensor], trim: int) -> torch.Tensor:
    """Coordinate-wise mean of p rows after dropping the `trim` lowest and highest values.

    Sums the kept ranks rather than subtracting the extremes from the total: an extreme of 1e30
    would otherwise wipe out the honest values' precision."""
    p = len(rows)
    kept = order_statistics(rows, tuple(range(trim, p - trim)))
    total = kept[0].clone()
    for row in kept[1:]:
        total += row
    return total / (p - 2 * trim)


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
            sources, lambda rows: trimmed_mean(rows, trim), out, chunk_size=self.chunk_size
        )
        return RuleOutput()
