"""The classic rules' defining properties, and the registry that builds them by name."""

from __future__ import annotations

import pytest
import torch
from peertrain.swarm.aggregation import (
    AGGREGATORS,
    AggregatorConfigError,
    NotEnoughUpdates,
    build_aggregator,
)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_mean_is_the_mean():
    updates = list(_randn(6, 300, seed=0))
    result = build_aggregator("mean").aggregate(updates)
    assert torch.allclose(result.update, torch.stack(updates).mean(0), atol=1e-6)
    assert result.weights == pytest.approx([1 / 6] * 6)


def test_median_of_an_odd_set_is_its_middle_value_per_coordinate():
    stack = _randn(7, 500, seed=1)
    result = build_aggregator("median").aggregate(list(stack))
    middle = stack.sort(dim=0).values[3]
    assert torch.equal(result.update, middle)  # exact: a selected value, not an estimate


def test_median_of_an_even_set_averages_the_two_middle_values():
    stack = torch.tensor([[1.0, -4.0], [2.0, 0.0], [10.0, 6.0], [3.0, 100.0]])
    result = build_aggregator("median").aggregate(list(stack))
    assert result.update.tolist() == [2.5, 3.0]


def test_median_ignores_a_minority_of_wild_values():
    stack = torch.ones(9, 50)
    stack[:4] = 1e6 * _randn(4, 50, seed=2)
    rule = build_aggregator("median", max_norm_ratio=None)
    assert torch.equal(rule.aggregate(list(stack)).update, torch.ones(50))


def test_trimmed_mean_drops_the_f_extremes_on_each_side():
    honest = _randn(7, 200, seed=3)
    high, low = torch.full((200,), 1e5), torch.full((200,), -1e5)
    stack = torch.cat([honest, high[None], high[None] * 2, low[None]])
    rule = build_aggregator("trimmed-mean", f=2, max_norm_ratio=None)  # the rule, not validation
    result = rule.aggregate(list(stack))
    # per coordinate the two largest (1e5, 2e5) and the two smallest (-1e5, min honest) go
    expected = honest.sort(dim=0).values[1:].mean(0)
    assert torch.allclose(result.update, expected, atol=1e-5)


def test_trimmed_mean_with_f_zero_is_the_mean():
    stack = _randn(5, 100, seed=4)
    result = build_aggregator("trimmed-mean", f=0).aggregate(list(stack))
    assert torch.allclose(result.update, stack.mean(0), atol=1e-6)


def test_multi_krum_picks_the_cluster():
    cluster = [torch.ones(100) + 0.01 * u for u in _randn(7, 100, seed=5)]
    outliers = [torch.full((100,), 5.0), -3 * torch.ones(100)]
    result = build_aggregator("multi-krum", f=2, m=5).aggregate(outliers + cluster)
    assert result.weights[:2] == (0.0, 0.0)
    assert sum(w > 0 for w in result.weights) == 5
    assert max(result.scores[2:]) < min(result.scores[:2])
    assert torch.allclose(result.update, torch.ones(100), atol=0.02)


def test_krum_m_1_returns_one_cluster_member_exactly():
    cluster = [torch.ones(60) + 0.01 * u for u in _randn(6, 60, seed=6)]
    updates = [torch.full((60,), -9.0)] + cluster
    result = build_aggregator("multi-krum", f=1, m=1).aggregate(updates)
    chosen = result.weights.index(1.0)
    assert chosen >= 1
    assert torch.equal(result.update, updates[chosen])


def test_multi_krum_needs_2f_plus_3_inputs_and_says_so():
    with pytest.raises(NotEnoughUpdates, match="needs at least 7") as caught:
        build_aggregator("multi-krum", f=2).aggregate(list(_randn(6, 10, seed=7)))
    assert len(caught.value.verdicts) == 6


def test_trimmed_mean_needs_more_than_2f_inputs():
    with pytest.raises(NotEnoughUpdates):
        build_aggregator("trimmed-mean", f=3).aggregate(list(_randn(6, 10, seed=8)))


def test_registry_names_and_errors():
    assert set(AGGREGATORS) == {"mean", "median", "trimmed-mean", "multi-krum", "flag"}
    with pytest.raises(AggregatorConfigError, match="choose one of"):
        build_aggregator("krum-ish")
    with pytest.raises(AggregatorConfigError, match=r"unknown option\(s\) \['rank'\].*'r'"):
        build_aggregator("flag", rank=4)
    with pytest.raises(AggregatorConfigError, match="iterations"):
        build_aggregator("flag", iterations=0)
    with pytest.raises(AggregatorConfigError, match="max_norm_ratio"):
        build_aggregator("mean", max_norm_ratio=0.5)
    assert build_aggregator("multi-krum", f=3, m=4, chunk_size=64).m == 4


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_rule_writes_into_a_given_buffer(name):
    out = torch.full((80,), 7.0)
    result = build_aggregator(name).aggregate(list(_randn(7, 80, seed=9)), out=out)
    assert result.update is out
    assert not torch.equal(out, torch.full((80,), 7.0))


@pytest.mark.parametrize("p", range(1, 20))
def test_sorting_network_sorts_every_column_ties_included(p):
    from peertrain.swarm.aggregation.coordinatewise import order_statistics

    stack = torch.randint(0, 4, (p, 500), generator=torch.Generator().manual_seed(p)).float()
    stack[:, :3] = torch.randn(p, 3)  # and some distinct values
    expected = stack.sort(dim=0).values
    assert torch.equal(torch.stack(order_statistics(list(stack), tuple(range(p)))), expected)
    middle = (p // 2,)
    assert torch.equal(order_statistics(list(stack), middle)[0], expected[p // 2])


@pytest.mark.parametrize("p", [5, 8, 13, 16])
def test_sorting_network_is_correct_by_the_zero_one_principle(p):
    """A comparator network sorts every input iff it sorts every 0/1 input: check all 2^p."""
    from peertrain.swarm.aggregation.coordinatewise import order_statistics

    columns = torch.arange(1 << p)
    stack = ((columns[None, :] >> torch.arange(p)[:, None]) & 1).float()
    ordered = torch.stack(order_statistics(list(stack), tuple(range(p))))
    assert torch.equal(ordered, stack.sort(dim=0).values)
