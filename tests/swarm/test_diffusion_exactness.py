"""Issue 16's exactness test, with no training: experts per cluster and the router's posterior
recombine into exactly the marginal flow of the whole data set (Decentralized Diffusion Models).

For a finite 2-D data set (an 8-Gaussian ring) every flow is a finite weighted sum, so the
reference marginal velocity below is written from the definition of rectified flow, independently
of the library's general-schedule formulas.
"""

from __future__ import annotations

import math

import torch
from peertrain.swarm.diffusion import (
    PartitionConfig,
    RectifiedFlow,
    SamplerConfig,
    Strategy,
    cluster_posterior,
    empirical_cluster_velocity,
    fit_partition,
    integrate,
    routed_velocity,
)

SCHEDULE = RectifiedFlow()
CLUSTERS = 4


def eight_gaussian_ring(points_per_mode: int = 400, *, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    angles = torch.arange(8, dtype=torch.float64) * (2 * math.pi / 8)
    centres = 4.0 * torch.stack([angles.cos(), angles.sin()], dim=1)
    jitter = 0.3 * torch.randn(8, points_per_mode, 2, generator=generator, dtype=torch.float64)
    return (centres[:, None, :] + jitter).reshape(-1, 2)


def rectified_flow_marginal(data: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor):
    """u_t(x) = Σ_i w_i (x − x_i)/t, w_i ∝ exp(−|x − (1−t)x_i|² / 2t²): since x_t = (1−t)x_0 + tε,
    the conditional velocity ε − x_0 equals (x_t − x_0)/t."""
    offsets = x_t[:, None, :] - (1 - t)[:, None, None] * data[None]
    weights = torch.softmax(-(offsets**2).sum(-1) / (2 * t[:, None] ** 2), dim=1)
    return (weights[:, :, None] * (x_t[:, None, :] - data[None])).sum(1) / t[:, None]


def clustered_ring():
    data = eight_gaussian_ring()
    partition = fit_partition(
        data.numpy(),
        PartitionConfig(clusters=CLUSTERS, fine_clusters=32, features=2),
        dataset_digest="ring",
    )
    return data, torch.from_numpy(partition.assignments)


def exact_experts_and_router(data: torch.Tensor, clusters: torch.Tensor):
    experts = [empirical_cluster_velocity(SCHEDULE, data, clusters, k) for k in range(CLUSTERS)]

    def router(x_t, t):  # log p(k | x_t): the softmax inside the sampler gives p back
        return cluster_posterior(SCHEDULE, data, clusters, CLUSTERS, x_t, t).log()

    return experts, router


def query_points(data: torch.Tensor, count: int = 600, *, seed: int = 1):
    """(x_t, t) on the noised data (where the flow matters) at t from 0.02 to 0.98."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.linspace(0.02, 0.98, count, dtype=torch.float64)
    x0 = data[torch.randint(len(data), (count,), generator=generator)]
    eps = torch.randn(count, 2, generator=generator, dtype=torch.float64)
    return (1 - t)[:, None] * x0 + t[:, None] * eps, t


def test_marginal_flow_is_the_posterior_weighted_sum_of_cluster_flows():
    data, clusters = clustered_ring()
    experts, router = exact_experts_and_router(data, clusters)
    x_t, t = query_points(data)

    mixed = routed_velocity(experts, router, Strategy(kind="full"))(x_t, t)

    error = (mixed - rectified_flow_marginal(data, x_t, t)).abs().max()
    assert error < 1e-6, f"largest deviation {error:.3g}"


def test_the_check_is_sensitive_a_single_expert_is_not_the_marginal_flow():
    data, clusters = clustered_ring()
    experts, router = exact_experts_and_router(data, clusters)
    x_t, t = query_points(data)

    top1 = routed_velocity(experts, router, Strategy(kind="top", k=1))(x_t, t)

    assert (top1 - rectified_flow_marginal(data, x_t, t)).abs().max() > 1e-2


def test_sampling_full_from_exact_experts_follows_the_exact_marginal_flow():
    data, clusters = clustered_ring()
    experts, router = exact_experts_and_router(data, clusters)
    noise = torch.randn(200, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    sampler = SamplerConfig(steps=25, method="euler")  # Euler never evaluates t = 0 (σ = 0)

    from_experts = integrate(
        routed_velocity(experts, router, Strategy(kind="full")), noise, sampler
    )
    from_marginal = integrate(lambda x, t: rectified_flow_marginal(data, x, t), noise, sampler)

    assert (from_experts - from_marginal).abs().max() < 1e-6
    # and the samples land on the ring (radius 4): the flow really transports noise to data
    assert ((from_marginal.norm(dim=1) - 4.0).abs() < 1.0).float().mean() > 0.95
