"""Sampling strategies mix expert velocities by the router's probabilities; ODE steppers."""

from __future__ import annotations

import math

import pytest
import torch
from peertrain.swarm.diffusion import (
    SamplerConfig,
    Strategy,
    expert_weights,
    integrate,
    routed_velocity,
    sample,
)
from peertrain.swarm.errors import ConfigError

K = 4


def linear_expert(k: int):
    """Expert k's velocity (k + 1)·x + t: distinct, cheap, and easy to check by hand."""
    return lambda x, t: (k + 1) * x + t[:, None]


EXPERTS = [linear_expert(k) for k in range(K)]


def random_router(seed: int = 0):
    table = torch.randn(64, K, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return lambda x, t: table[: len(x)]


def points(n: int = 64):
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return x, torch.linspace(0.1, 0.9, n, dtype=torch.float64)


def stacked_velocities(x, t):
    return torch.stack([expert(x, t) for expert in EXPERTS], dim=1)  # [B, K, 3]


def test_top1_with_a_one_hot_router_is_that_expert_alone():
    x, t = points()
    chosen = torch.arange(len(x)) % K
    one_hot = lambda x, t: 60.0 * torch.nn.functional.one_hot(chosen, K).double()  # noqa: E731

    velocity = routed_velocity(EXPERTS, one_hot, Strategy.parse("top1"))(x, t)

    for row in range(len(x)):
        expected = EXPERTS[chosen[row]](x[row : row + 1], t[row : row + 1])
        assert torch.equal(velocity[row : row + 1], expected)


def test_full_is_the_probability_weighted_sum_of_all_experts():
    x, t = points()
    router = random_router()

    velocity = routed_velocity(EXPERTS, router, Strategy.parse("full"))(x, t)

    probabilities = torch.softmax(router(x, t), dim=1)
    expected = (probabilities[:, :, None] * stacked_velocities(x, t)).sum(1)
    assert torch.allclose(velocity, expected, atol=1e-12)


def test_top2_renormalises_over_the_two_most_likely_experts():
    probabilities = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)

    weights = expert_weights(probabilities, Strategy.parse("top2"))

    assert torch.allclose(weights, torch.tensor([[0.625, 0.375, 0.0, 0.0]], dtype=torch.float64))


def test_threshold_keeps_the_likely_experts_and_always_the_most_likely():
    probabilities = torch.tensor([[0.4, 0.35, 0.2, 0.05], [0.1, 0.15, 0.15, 0.6]])

    low = expert_weights(probabilities, Strategy.parse("threshold0.3"))
    high = expert_weights(probabilities, Strategy.parse("threshold0.9"))

    assert torch.allclose(low[0], torch.tensor([0.4, 0.35, 0, 0]) / 0.75)
    assert torch.allclose(low[1], torch.tensor([0.0, 0, 0, 1]))
    assert torch.allclose(high, torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 1]]))


def test_sample1_draws_one_expert_per_row_in_proportion_to_the_router():
    probabilities = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).repeat(20_000, 1)

    weights = expert_weights(
        probabilities, Strategy.parse("sample1"), generator=torch.Generator().manual_seed(0)
    )

    assert torch.equal(weights.sum(1), torch.ones(20_000))
    assert set(weights.unique().tolist()) == {0.0, 1.0}
    assert torch.allclose(weights.mean(0), probabilities[0], atol=0.015)


def test_only_experts_a_row_needs_are_evaluated_and_only_on_those_rows():
    calls = [0] * K
    rows_seen = [0] * K

    def counting(k):
        def expert(x, t):
            calls[k] += 1
            rows_seen[k] += len(x)
            return EXPERTS[k](x, t)

        return expert

    x, t = points()
    favours_0_and_2 = lambda x, t: torch.tensor([[9.0, -9, 0, -9]]).repeat(len(x), 1)  # noqa: E731
    experts = [counting(k) for k in range(K)]

    routed_velocity(experts, favours_0_and_2, Strategy.parse("top1"))(x, t)
    assert calls == [1, 0, 0, 0] and rows_seen[0] == len(x)
    routed_velocity(experts, favours_0_and_2, Strategy.parse("top2"))(x, t)
    assert calls == [2, 0, 1, 0]


def test_heun_is_more_accurate_than_euler_at_the_same_step_count():
    # dx/dt = x from t = 1 to t = 0 gives x(0) = x(1)/e
    noise = torch.ones(1, 1, dtype=torch.float64)
    exact = math.exp(-1.0)

    def error(method):
        return abs(
            float(integrate(lambda x, t: x, noise, SamplerConfig(steps=10, method=method))) - exact
        )

    assert error("heun") < error("euler") / 20
    assert error("euler") < 0.03


def changes_its_mind_after_the_first_step(calls: list[int]):
    """A router sure of expert row % K at t = 1 and of expert (row + 1) % K at every later t."""

    def router(x, t):
        calls.append(len(x))
        favourite = (torch.arange(len(x)) + (t < 1.0).long()) % K
        return 60.0 * torch.nn.functional.one_hot(favourite, K).double()

    return router


def test_pick1_keeps_the_expert_drawn_at_the_first_step_for_the_whole_trajectory():
    noise, _ = points(8)
    calls: list[int] = []
    router = changes_its_mind_after_the_first_step(calls)
    sampler = SamplerConfig(steps=6, method="heun")

    picked = sample(EXPERTS, router, noise, strategy=Strategy.parse("pick1"), sampler=sampler)
    per_step = sample(EXPERTS, router, noise, strategy=Strategy.parse("sample1"), sampler=sampler)

    assert calls[0] == len(noise) and len(calls) == 1 + 2 * 6  # pick1 asked the router once
    for row in range(len(noise)):
        alone = integrate(EXPERTS[row % K], noise[row : row + 1], sampler)
        assert torch.equal(picked[row : row + 1], alone)
    assert not torch.allclose(per_step, picked)  # sample1 follows the router's later choices


def test_a_pick1_velocity_refuses_a_second_batch_of_another_size():
    x, t = points(8)
    velocity = routed_velocity(EXPERTS, random_router(), Strategy.parse("pick1"))
    velocity(x, t)
    with pytest.raises(ConfigError):
        velocity(x[:4], t[:4])


@pytest.mark.parametrize("name", ["full", "top1", "top3", "sample1", "pick1", "threshold0.25"])
def test_strategy_names_round_trip(name):
    assert Strategy.parse(name).name == name


@pytest.mark.parametrize("name", ["top0", "best", "sample2", "pick2", "threshold1.5"])
def test_unknown_strategies_are_refused(name):
    with pytest.raises(ConfigError):
        Strategy.parse(name)
