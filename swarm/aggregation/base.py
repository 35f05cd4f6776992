"""The one aggregator interface every rule implements.

An aggregator is a frozen, stateless config object (safe to share between worker threads). Its two
entry points run the same pipeline: structure checks → one statistics pass (norms, Gram when the
rule needs it) → value checks → the rule on the accepted inputs → the output written chunk by chunk.

    result = aggregator.aggregate(updates)                 # flat fp32 tensors in memory
    result = aggregator.aggregate_streaming(sources, out=buffer)   # UpdateSources, read in chunks

Subclasses implement `_combine`, which sees only accepted inputs, and may set `needs_gram`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from peertrain.swarm.aggregation.errors import AggregatorConfigError, NotEnoughUpdates
from peertrain.swarm.aggregation.streaming import (
    DEFAULT_CHUNK_SIZE,
    InputStatistics,
    TensorSource,
    UpdateSource,
    accumulate_statistics,
)
from peertrain.swarm.aggregation.validation import (
    DEFAULT_MAX_NORM_RATIO,
    RejectReason,
    Verdict,
    check_structure,
    judge_values,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleOutput:
    """What a rule reports besides the values it wrote; per-input tuples cover accepted inputs."""

    weights: tuple[float, ...] | None = None  # update = Σ weights[k] · accepted[k], if linear
    scores: tuple[float, ...] | None = None  # rule-specific, documented on the rule
    objective: tuple[float, ...] = ()  # objective after each accepted iteration (Flag)


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateResult:
    """The aggregate of one round and how each input fared.

    `verdicts` has one entry per input given, in order. `weights` and `scores` (when the rule has
    them) also have one entry per input given; rejected inputs get weight 0.0 and score NaN.
    """

    update: torch.Tensor
    verdicts: tuple[Verdict, ...]
    weights: tuple[float, ...] | None = None
    scores: tuple[float, ...] | None = None
    objective: tuple[float, ...] = ()

    @property
    def accepted(self) -> tuple[int, ...]:
        return tuple(v.index for v in self.verdicts if v.accepted)

    @property
    def rejected(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.accepted)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregator(ABC):
    """Base of every rule. Options common to all rules live here."""

    max_norm_ratio: float | None = DEFAULT_MAX_NORM_RATIO
    chunk_size: int = DEFAULT_CHUNK_SIZE

    name: ClassVar[str] = ""  # the registry name, set by each rule
    needs_gram: ClassVar[bool] = False  # does `_combine` read `stats.gram`?

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise AggregatorConfigError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.max_norm_ratio is not None and not self.max_norm_ratio > 1:
            raise AggregatorConfigError(
                f"max_norm_ratio must be > 1 (or None to disable), got {self.max_norm_ratio}"
            )

    def min_inputs(self) -> int:
        """The fewest accepted inputs this rule can work with."""
        return 1

    def aggregate(
        self,
        updates: Sequence[object],
        *,
        numel: int | None = None,
        out: torch.Tensor | None = None,
        reference: Collection[int] = (),
    ) -> AggregateResult:
        """Aggregate flat fp32 tensors; `numel=None` expects the most common length.
        `reference`: inputs whose norms set the norm bound (validation.judge_values)."""
        verdicts = check_structure(updates, numel=numel)
        sources = {v.index: TensorSource(updates[v.index]) for v in verdicts if v.accepted}
        return self._run(verdicts, sources, out, reference)  # type: ignore[arg-type]

    def aggregate_streaming(
        self,
        sources: Sequence[UpdateSource],
        *,
        numel: int | None = None,
        out: torch.Tensor | None = None,
        reference: Collection[int] = (),
    ) -> AggregateResult:
        """Aggregate sources read in chunks; `out` (numel fp32) is the only full-size buffer."""
        if numel is None:
            lengths = [s.numel for s in sources]
            numel = max(set(lengths), key=lengths.count) if lengths else 0
        verdicts = [
            Verdict(index=i)
            if s.numel == numel
            else Verdict(index=i, reason=RejectReason.SHAPE, detail=f"{s.numel} != {numel}")
            for i, s in enumerate(sources)
        ]
        chosen = {v.index: sources[v.index] for v in verdicts if v.accepted}
        return self._run(verdicts, chosen, out, reference)

    def statistics(self, sources: Sequence[UpdateSource]) -> InputStatistics:
        """What the rule decides from: squared norms, and the Gram when it needs one. Both are
        sums over coordinates, so a model cut in shards has them as the sum of its shards'."""
        return accumulate_statistics(sources, chunk_size=self.chunk_size, with_gram=self.needs_gram)

    def decide(
        self,
        verdicts: list[Verdict],
        indices: Sequence[int],
        stats: InputStatistics,
        reference: Collection[int] = (),
    ) -> tuple[list[int], InputStatistics]:
        """Judge the inputs `indices` by their statistics (updating `verdicts`); the accepted
        ones and their statistics. Raises NotEnoughUpdates when too few remain."""
        accepted: list[int] = []
        if indices:
            judged = judge_values(
                indices, stats.sq_norms, max_norm_ratio=self.max_norm_ratio, reference=reference
            )
            for verdict in judged:
                verdicts[verdict.index] = verdict
            keep = [k for k, i in enumerate(indices) if verdicts[i].accepted]
            accepted, stats = [indices[k] for k in keep], _select(stats, keep)
        if len(accepted) < self.min_inputs():
            raise NotEnoughUpdates(
                f"{self.name}: {len(accepted)} of {len(verdicts)} inputs accepted, "
                f"needs at least {self.min_inputs()}",
                verdicts=verdicts,
            )
        return accepted, stats

    def write(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        """Write the aggregate of the accepted `sources` (whole updates, or every input's slice
        of one shard) into `out`; `stats` are the accepted inputs' whole-update statistics, so
        a linear rule finds the same weights from any shard (swarm/aggregation/sharded.py)."""
        return self._combine(sources, stats, out)

    def _run(
        self,
        verdicts: list[Verdict],
        sources: dict[int, UpdateSource],
        out: torch.Tensor | None,
        reference: Collection[int] = (),
    ) -> AggregateResult:
        indices = list(sources)
        stats = self.statistics(list(sources.values())) if indices else _NO_STATISTICS
        kept, stats = self.decide(verdicts, indices, stats, reference)
        sources = {i: sources[i] for i in kept}
        accepted = list(sources.values())
        if out is None:
            device = accepted[0].read(0, min(1, accepted[0].numel)).device
            out = torch.empty(accepted[0].numel, device=device)
        elif out.dtype != torch.float32 or out.shape != (accepted[0].numel,):
            expected = f"float32 ({accepted[0].numel},)"
            raise ValueError(f"out must be {expected}, got {out.dtype} {tuple(out.shape)}")
        rule = self._combine(accepted, stats, out)
        return AggregateResult(
            update=out,
            verdicts=tuple(verdicts),
            weights=_spread(rule.weights, list(sources), len(verdicts), 0.0),
            scores=_spread(rule.scores, list(sources), len(verdicts), float("nan")),
            objective=rule.objective,
        )

    @abstractmethod
    def _combine(
        self, sources: list[UpdateSource], stats: InputStatistics, out: torch.Tensor
    ) -> RuleOutput:
        """Write the aggregate of the (accepted) `sources` into `out`."""


_NO_STATISTICS = InputStatistics(sq_norms=torch.zeros(0, dtype=torch.float64), gram=None)


def _select(stats: InputStatistics, keep: list[int]) -> InputStatistics:
    rows = torch.tensor(keep, dtype=torch.long)
    gram = None if stats.gram is None else stats.gram[rows][:, rows]
    return InputStatistics(sq_norms=stats.sq_norms[rows], gram=gram)


def _spread(
    values: tuple[float, ...] | None, indices: list[int], size: int, fill: float
) -> tuple[float, ...] | None:
    if values is None:
        return None
    full = [fill] * size
    for index, value in zip(indices, values, strict=True):
        full[index] = value
    return tuple(full)
