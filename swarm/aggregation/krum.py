"""Multi-Krum (Blanchard et al. 2017; El Mhamdi et al. 2018): average the m most central inputs.

Each input's score is the sum of squared distances to its p − f − 2 nearest other inputs; the m
lowest scores are averaged. Distances come from the Gram matrix, ‖g_i − g_j‖² = K_ii + K_jj − 2K_ij,
so the rule costs one Gram pass and one output pass, O(d·p²), and streams like the others.
It needs p ≥ 2f + 3. `m=None` averages p − f inputs; m = 1 is the original Krum.
Scores (lower = more central) are reported per input so callers can see who was left out.
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
    write_linear_combination,
)


def krum_scores(gram: torch.Tensor, f: int) -> torch.Tensor:
    """Krum score of every input from the (p, p) Gram: sum of its p−f−2 smallest sq. distances."""
    diag = gram.diagonal()
    sq_dist = (diag[:, None] + diag[None, :] - 2 * gram).clamp_min(0)
    sq_dist.fill_diagonal_(float("inf"))  # an input is not its own neighbour
    neighbours = gram.shape[0] - f - 2
    return sq_dist.topk(neighbours, dim=1, largest=False).values.sum(dim=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class MultiKrumAggregator(Aggregator):
    """Mean of the `m` inputs with the lowest Krum scores, tolerating `f` Byzantine inputs."""

    name: ClassVar[str] = "multi-krum"
    needs_gram: ClassVar[bool] = True
    f: int = 1
    m: int | None = None

    def __post_init__(self) -> None:
        super(MultiKrumAggregator, self).__post_init__()
        if self.f < 0:
            raise AggregatorConfigError(f"multi-krum: f must be >= 0, got {self.f}")
        if self.m is not None and self.m < 1:
            raise AggregatorConfigError(f"multi-krum: m must be >= 1 or None, got {self.m}")

    def min_inputs(self) -> int:
        return max(2 * self.f + 3, self.m or 0)

    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        assert stats.gram is not None
        p = len(sources)
        m = p - self.f if self.m is None else self.m
        scores = krum_scores(stats.gram, self.f)
        chosen = torch.sort(scores, stable=True).indices[:m]
        weights = torch.zeros(p, dtype=torch.float64)
        weights[chosen] = 1.0 / m
        write_linear_combination(sources, weights, out, chunk_size=self.chunk_size)
        return RuleOutput(weights=tuple(weights.tolist()), scores=tuple(scores.tolist()))
