"""Aggregation is a function of the set of updates, bit for bit: whatever torch's thread count
and whatever chunk size the rule streams with. Members that aggregated the same set must end
in the same state checksum (a member that missed updates replays the round: issue 14)."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.aggregation import AGGREGATORS, build_aggregator

OPTIONS = {"trimmed-mean": {"f": 1}, "multi-krum": {"f": 1}, "flag": {"r": None}}
CHUNKS = (1 << 20, 4096, 1000, 777)


def _updates(p: int = 7, d: int = 150_001) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(d, generator=gen)
    return [base + torch.randn(d, generator=gen) * (1 + i / 3) for i in range(p)]


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_the_aggregate_of_a_set_is_bit_identical_for_any_thread_count_and_chunk_size(name):
    updates = _updates()
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            for chunk in CHUNKS:
                rule = build_aggregator(name, chunk_size=chunk, **OPTIONS.get(name, {}))
                results.append(((threads, chunk), rule.aggregate(updates).update))
    finally:
        torch.set_num_threads(before)
    reference = results[0][1]
    differing = [where for where, update in results if not torch.equal(update, reference)]
    assert differing == []


def test_norms_over_many_spans_are_bit_identical_for_any_thread_count_and_chunk_size():
    """Norms are reduced sixteen windows per torch call (streaming._NORM_SPAN): over several
    spans and a short last one, the verdicts' norms and the mean still do not move."""
    from peertrain.swarm.aggregation import streaming

    d = 2 * streaming._NORM_SPAN + 3 * streaming.STATS_WINDOW + 1001
    gen = torch.Generator().manual_seed(5)
    updates = [torch.randn(d, generator=gen) * (1 + k) for k in range(3)]
    before = torch.get_num_threads()
    seen = set()
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            for chunk in (1 << 20, 100_003):
                result = build_aggregator("mean", chunk_size=chunk).aggregate(updates)
                norms = tuple(v.norm for v in result.verdicts)
                seen.add((norms, result.update.numpy().tobytes()))
    finally:
        torch.set_num_threads(before)
    assert len(seen) == 1
