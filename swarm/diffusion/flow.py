"""Flow matching: the noising schedule, the conditional velocity target, and the training loss.

x_t = α_t·x_0 + σ_t·ε with t = 0 at the data and t = 1 at pure noise; a model learns the velocity
dx_t/dt. The default is rectified flow (α = 1 − t, σ = t), whose target ε − x_0 needs no weighting;
the schedule is a class so the analytic flows (analytic.py) and the samplers work for any (α, σ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

VelocityFn = Callable[[Tensor, Tensor], Tensor]  # (x_t [B, ...], t [B]) -> velocity like x_t


@dataclass(frozen=True, slots=True, kw_only=True)
class RectifiedFlow:
    """α_t = 1 − t, σ_t = t: straight paths from data (t = 0) to noise (t = 1)."""

    def alpha(self, t: Tensor) -> Tensor:
        return 1.0 - t

    def sigma(self, t: Tensor) -> Tensor:
        return t

    def d_alpha(self, t: Tensor) -> Tensor:
        return torch.full_like(t, -1.0)

    def d_sigma(self, t: Tensor) -> Tensor:
        return torch.ones_like(t)


def _per_item(t: Tensor, like: Tensor) -> Tensor:
    """`t` of shape [B] viewed so it broadcasts over the item dimensions of `like`."""
    return t.reshape(-1, *([1] * (like.dim() - 1))).to(like.dtype)


def noised(schedule: RectifiedFlow, x0: Tensor, eps: Tensor, t: Tensor) -> Tensor:
    """x_t = α_t·x_0 + σ_t·ε."""
    t = _per_item(t, x0)
    return schedule.alpha(t) * x0 + schedule.sigma(t) * eps


def conditional_velocity(schedule: RectifiedFlow, x0: Tensor, eps: Tensor, t: Tensor) -> Tensor:
    """u_t(x_t | x_0, ε) = α'_t·x_0 + σ'_t·ε, the regression target of flow matching."""
    t = _per_item(t, x0)
    return schedule.d_alpha(t) * x0 + schedule.d_sigma(t) * eps


def flow_matching_loss(
    velocity: VelocityFn,
    x0: Tensor,
    *,
    generator: torch.Generator,
    schedule: RectifiedFlow | None = None,
) -> Tensor:
    """Mean squared error between v_θ(x_t, t) and the conditional velocity, t ~ U(0, 1)."""
    schedule = schedule or RectifiedFlow()
    t = torch.rand(x0.shape[0], generator=generator, dtype=x0.dtype)
    eps = torch.randn(x0.shape, generator=generator, dtype=x0.dtype)
    x_t = noised(schedule, x0, eps, t)
    target = conditional_velocity(schedule, x0, eps, t)
    return torch.mean((velocity(x_t, t) - target) ** 2)
