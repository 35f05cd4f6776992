"""Exact flows of a finite data set: the ground truth that experts, router and samplers approximate.

For data {x_i} (uniform weights) the marginal velocity at (x_t, t) is the posterior-weighted mean
of the conditional velocities, with Gaussian kernel weights w_i ∝ N(x_t; α_t·x_i, σ_t²·I). Restrict
the sum to one cluster and it is that cluster's flow u_t^k; sum the weights per cluster and it is
the posterior p(k | x_t). Computed with log-sum-exp so it stays exact at small t (use float64).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .flow import RectifiedFlow, VelocityFn


def posterior_weights(schedule: RectifiedFlow, data: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
    """[B, N] p(x_0 = x_i | x_t): each row sums to one."""
    return torch.softmax(_log_kernel(schedule, data, x_t, t), dim=1)


def _log_kernel(schedule: RectifiedFlow, data: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
    """[B, N] log N(x_t; α_t·x_i, σ_t²·I) up to a term that is the same for every i."""
    flat_x, flat_data = x_t.reshape(len(x_t), -1), data.reshape(len(data), -1)
    alpha, sigma = schedule.alpha(t)[:, None], schedule.sigma(t)[:, None]
    squared = (
        (flat_x * flat_x).sum(1, keepdim=True)
        - 2.0 * alpha * (flat_x @ flat_data.T)
        + alpha**2 * (flat_data * flat_data).sum(1)[None, :]
    )
    return -squared / (2.0 * sigma**2)


def empirical_velocity(schedule: RectifiedFlow, data: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
    """The exact marginal velocity of the flow from the points `data` [N, ...] to noise."""
    weights = posterior_weights(schedule, data, x_t, t)  # [B, N]
    flat_x, flat_data = x_t.reshape(len(x_t), -1), data.reshape(len(data), -1)
    alpha, sigma = schedule.alpha(t)[:, None], schedule.sigma(t)[:, None]
    mean_x0 = weights @ flat_data  # E[x_0 | x_t]
    mean_eps = (flat_x - alpha * mean_x0) / sigma  # E[ε | x_t]
    velocity = schedule.d_alpha(t)[:, None] * mean_x0 + schedule.d_sigma(t)[:, None] * mean_eps
    return velocity.reshape(x_t.shape)


def cluster_posterior(
    schedule: RectifiedFlow,
    data: Tensor,
    clusters: Tensor,
    num_clusters: int,
    x_t: Tensor,
    t: Tensor,
) -> Tensor:
    """[B, K] p(k | x_t): the posterior mass of the points of each cluster."""
    weights = posterior_weights(schedule, data, x_t, t)
    per_cluster = torch.zeros(len(x_t), num_clusters, dtype=weights.dtype)
    return per_cluster.index_add_(1, clusters, weights)


def empirical_cluster_velocity(
    schedule: RectifiedFlow, data: Tensor, clusters: Tensor, cluster: int
) -> VelocityFn:
    """The exact flow u_t^k of one cluster's points, as a velocity function (x_t, t) -> v."""
    members = data[clusters == cluster]
    return lambda x_t, t: empirical_velocity(schedule, members, x_t, t)
