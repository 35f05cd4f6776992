"""Robust aggregation over shards: what lets each member of a group own one slice of the model.

Every rule here decides from the p inputs' statistics and writes its output coordinate by
coordinate, so nobody needs every whole input:

- the statistics are sums over coordinates: ‖g_i‖² = Σ_k ‖g_i[k]‖² and the Gram G = Σ_k G_k,
  where k runs over the shards of the flat parameter vector and G_k = X[k]ᵀ X[k] is p × p;
- the value checks (non-finite, the norm bound) read only the norms, so every member that sums
  the same per-shard statistics in shard order accepts the same inputs, bit for bit;
- a linear rule (mean, Multi-Krum, Flag) turns G into weights a (p numbers) and writes
  out[k] = Σ_i a_i g_i[k]: each shard with the same a, because a comes from G alone;
- a coordinate-wise rule (median, trimmed mean) needs nothing but the accepted inputs' slices
  of the shard it writes.

So the owner of shard k receives only shard k of every input (U/K bytes from each of p members),
publishes its partial statistics (p + p² numbers), and writes shard k of the aggregate from the
summed statistics; members fetch the K aggregated shards. Each member moves about 2·U per round
whatever p is, where gathering every whole input moves (p − 1)·U.

    plan = plan_shards(numel, shards=4)
    parts = [shard_statistics(rule, sources, s) for s in plan.shards]     # one per owner
    decision = decide_from_shards(rule, parts, p)                          # any member, alike
    write_shard(rule, decision, sources, plan.shards[k], out[k_start:k_stop])  # owner k

`aggregate_sharded` runs the three steps in one process: it is what the conformance test holds
against `Aggregator.aggregate` (tests/swarm/test_aggregation_sharded.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from .base import AggregateResult, Aggregator, _spread
from .streaming import STATS_WINDOW, InputStatistics, UpdateSource
from .validation import Verdict


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """The flat parameter vector cut into contiguous shards, in order."""

    numel: int
    shards: tuple[Shard, ...]


def plan_shards(numel: int, shards: int, *, align: int = STATS_WINDOW) -> ShardPlan:
    """`shards` contiguous shards of near-equal size, cut at multiples of `align` (the
    statistics pass's window: a shard's sums then use the windows a whole pass would), fewer
    when the vector has fewer aligned pieces than that; never an empty shard."""
    if numel < 1 or shards < 1:
        raise ValueError(f"cannot cut {numel} values into {shards} shards")
    pieces = -(-numel // align)
    count = min(shards, pieces)
    bounds = [min(numel, (pieces * k // count) * align) for k in range(count + 1)]
    return ShardPlan(
        numel=numel,
        shards=tuple(Shard(k, bounds[k], bounds[k + 1]) for k in range(count)),
    )


@dataclass(frozen=True, slots=True)
class SliceSource:
    """One input's slice [start, stop): an UpdateSource of its own."""

    source: UpdateSource
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start

    def read(self, start: int, stop: int) -> torch.Tensor:
        return self.source.read(self.start + start, self.start + stop)


def shard_statistics(
    rule: Aggregator, sources: Sequence[UpdateSource], shard: Shard
) -> InputStatistics:
    """The owner's part: the inputs' statistics over `shard` alone (`sources` are whole
    inputs; an owner that holds only its shard passes SliceSources of 0..len already)."""
    return rule.statistics([_slice(s, shard) for s in sources])


def total_statistics(parts: Sequence[InputStatistics]) -> InputStatistics:
    """Σ of the shards' statistics, added in shard order: every member holding the same parts
    gets the same bits."""
    sq_norms = torch.stack([part.sq_norms for part in parts]).sum(dim=0)
    if any(part.gram is None for part in parts):
        return InputStatistics(sq_norms=sq_norms, gram=None)
    gram = parts[0].gram.clone()
    for part in parts[1:]:
        gram += part.gram
    return InputStatistics(sq_norms=gram.diagonal().clone(), gram=gram)


@dataclass(frozen=True, slots=True)
class Decision:
    """What every member decides alike from the summed statistics."""

    verdicts: tuple[Verdict, ...]
    accepted: tuple[int, ...]  # input indices
    stats: InputStatistics  # of the accepted inputs


def decide_from_shards(
    rule: Aggregator,
    parts: Sequence[InputStatistics],
    inputs: int,
    *,
    reference: Collection[int] = (),
) -> Decision:
    """Value checks and acceptance from the shards' statistics (raises NotEnoughUpdates)."""
    verdicts = [Verdict(index=i) for i in range(inputs)]
    accepted, stats = rule.decide(verdicts, range(inputs), total_statistics(parts), reference)
    return Decision(verdicts=tuple(verdicts), accepted=tuple(accepted), stats=stats)


def write_shard(
    rule: Aggregator,
    decision: Decision,
    sources: Sequence[UpdateSource],
    shard: Shard,
    out: torch.Tensor,
):
    """The owner's output: the rule over the accepted inputs' slices of `shard`, into `out`
    (shard-sized). Returns the rule's report (weights for linear rules: alike on every shard)."""
    chosen = [_slice(sources[i], shard) for i in decision.accepted]
    return rule.write(chosen, decision.stats, out)


def aggregate_sharded(
    rule: Aggregator,
    updates: Sequence[torch.Tensor],
    *,
    shards: int,
    reference: Collection[int] = (),
) -> AggregateResult:
    """The sharded pipeline in one process, for flat fp32 updates of one length."""
    from .streaming import TensorSource

    sources = [TensorSource(u) for u in updates]
    plan = plan_shards(updates[0].numel(), shards)
    parts = [shard_statistics(rule, sources, shard) for shard in plan.shards]
    decision = decide_from_shards(rule, parts, len(sources), reference=reference)
    out = torch.empty(plan.numel, device=updates[0].device)
    report = None
    for shard in plan.shards:
        report = write_shard(rule, decision, sources, shard, out[shard.start : shard.stop])
    assert report is not None
    accepted = list(decision.accepted)
    size = len(decision.verdicts)
    return AggregateResult(
        update=out,
        verdicts=decision.verdicts,
        weights=_spread(report.weights, accepted, size, 0.0),
        scores=_spread(report.scores, accepted, size, float("nan")),
        objective=report.objective,
    )


def _slice(source: UpdateSource, shard: Shard) -> UpdateSource:
    if shard.start == 0 and shard.stop == source.numel:
        return source
    return SliceSource(source, shard.start, shard.stop)
