"""Sharded aggregation is the all-gather's aggregate: for every rule, the owners of K shards
each see only their shard of every input, publish its statistics, and write their shard of the
output; the result equals `Aggregator.aggregate` on the whole inputs within float32 rounding,
and every member decides the same bits from the same published statistics."""

from __future__ import annotations

import random

import pytest
import torch
from peertrain.swarm.aggregation import AGGREGATORS, build_aggregator
from peertrain.swarm.aggregation.sharded import (
    aggregate_sharded,
    decide_from_shards,
    plan_shards,
    shard_statistics,
)
from peertrain.swarm.aggregation.streaming import TensorSource

OPTIONS = {"trimmed-mean": {"f": 1}, "multi-krum": {"f": 1}, "flag": {"r": None}}
D = 150_001


def _updates(p: int = 7, d: int = D, *, outlier: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(d, generator=gen)
    updates = [base + torch.randn(d, generator=gen) * (1 + i / 3) for i in range(p)]
    updates[-1] = updates[-1] * outlier  # a scaled input for the norm bound to refuse
    return updates


def _close(sharded: torch.Tensor, whole: torch.Tensor) -> bool:
    scale = float(whole.abs().max())
    return torch.allclose(sharded, whole, rtol=1e-6, atol=1e-6 * scale)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@pytest.mark.parametrize("shards", [1, 4, 64])
@pytest.mark.parametrize("chunk", [1 << 20, 1000])
def test_every_rule_sharded_equals_the_all_gather_aggregate(name, shards, chunk, monkeypatch):
    # shards cut at 1024-value blocks here (the product cuts at statistics windows, 64 Ki):
    # 64 shards of a vector this short need the finer cut
    from peertrain.swarm.aggregation import sharded

    monkeypatch.setattr(sharded, "STATS_WINDOW", 1024)
    rule = build_aggregator(name, chunk_size=chunk, **OPTIONS.get(name, {}))
    updates = _updates()
    whole = rule.aggregate(updates)
    cut = aggregate_sharded(rule, updates, shards=shards)
    assert len(plan_shards(D, shards, align=1024).shards) == shards
    assert cut.accepted == whole.accepted
    assert _close(cut.update, whole.update)
    if whole.weights is not None:
        assert cut.weights == pytest.approx(whole.weights, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_the_norm_bound_refuses_the_same_inputs_from_shard_statistics(name):
    rule = build_aggregator(name, max_norm_ratio=10.0, **OPTIONS.get(name, {}))
    updates = _updates(outlier=1000.0)
    whole = rule.aggregate(updates, reference=range(6))
    cut = aggregate_sharded(rule, updates, shards=4, reference=range(6))
    assert 6 not in cut.accepted and cut.accepted == whole.accepted
    assert _close(cut.update, whole.update)


@pytest.mark.parametrize("name", ["flag", "multi-krum", "median"])
def test_every_member_decides_the_same_bits_whatever_chunk_size_each_owner_streams_with(name):
    """Each owner measures its shard with its own chunk size; members sum the published parts in
    shard order. The weights, the verdicts' norms and each written shard agree bit for bit."""
    updates, plan = _updates(), plan_shards(D * 4, 4)
    updates = [torch.cat([u] * 4) for u in updates]  # 600k values: four 64 Ki-aligned shards
    sources = [TensorSource(u) for u in updates]
    decisions = []
    for seed in range(3):
        chunks = random.Random(seed).choices([1 << 20, 4096, 1000, 777], k=len(plan.shards))
        parts = [
            shard_statistics(
                build_aggregator(name, chunk_size=c, **OPTIONS.get(name, {})), sources, s
            )
            for c, s in zip(chunks, plan.shards, strict=True)
        ]
        rule = build_aggregator(name, **OPTIONS.get(name, {}))
        decision = decide_from_shards(rule, parts, len(sources))
        decisions.append(
            (
                decision.accepted,
                tuple(v.norm for v in decision.verdicts),
                decision.stats.sq_norms.numpy().tobytes(),
            )
        )
    assert decisions[0] == decisions[1] == decisions[2]
