"""Sampling from experts: mix their velocities by the router's p(k | x_t), then integrate the ODE.

The exact marginal flow is Σ_k p(k | x_t)·u_t^k(x_t). Strategies approximate the sum:
    full          every expert, weighted by the router's probability
    top<k>        the k most likely experts, probabilities renormalised over them (top1 is best
                  in the paper)
    sample<1>     one expert per sample per step, drawn from the router's distribution (the
                  paper's Sample-1, "draw one expert per step")
    pick<1>       one expert per sample for the whole trajectory, drawn once from the router at
                  the first step (t = 1, where p(k | x_1) is the cluster prior): ancestral
                  sampling of the mixture, not a paper strategy; it shows what a per-trajectory
                  reading of Sample-1 would give
    threshold<p>  every expert with probability ≥ p (and always the most likely), renormalised
Only the experts some sample in the batch needs are evaluated, and only on the rows that need
them, so Top-1 costs one expert evaluation per sample per step however many experts there are.
The ODE runs from noise at t = 1 to data at t = 0 with Euler or Heun steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .flow import VelocityFn

RouterFn = Callable[[Tensor, Tensor], Tensor]  # (x_t, t) -> [B, K] logits
_STRATEGY = re.compile(r"^(full|top(\d+)|sample1|pick1|threshold([0-9.]+))$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """How expert velocities are mixed: `kind` is full | top | sample | pick | threshold."""

    kind: str = "top"
    k: int = 1
    threshold: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("full", "top", "sample", "pick", "threshold"):
            raise ConfigError(f"unknown strategy kind {self.kind!r}")
        if self.k < 1 or not 0.0 <= self.threshold <= 1.0:
            raise ConfigError("strategy k must be at least 1 and threshold within [0, 1]")

    @classmethod
    def parse(cls, name: str) -> Strategy:
        """From a command-line name: full, top1, top2, …, sample1, pick1, threshold0.2."""
        match = _STRATEGY.match(name)
        if match is None:
            raise ConfigError(
                f"unknown strategy {name!r}; use full, top<k>, sample1, pick1, threshold<p>"
            )
        if match[2]:
            return cls(kind="top", k=int(match[2]))
        if match[3]:
            return cls(kind="threshold", threshold=float(match[3]))
        return cls(kind={"full": "full", "sample1": "sample"}.get(name, "pick"))

    @property
    def name(self) -> str:
        names = {"full": "full", "top": f"top{self.k}", "sample": "sample1", "pick": "pick1"}
        return names.get(self.kind, f"threshold{self.threshold:g}")


def expert_weights(
    probabilities: Tensor, strategy: Strategy, *, generator: torch.Generator | None = None
) -> Tensor:
    """[B, K] mixing weights from the router's [B, K] probabilities: rows sum to one."""
    if strategy.kind == "full":
        return probabilities
    if strategy.kind in ("sample", "pick"):
        drawn = torch.multinomial(probabilities.float(), 1, generator=generator)
        return torch.zeros_like(probabilities).scatter_(1, drawn, 1.0)
    if strategy.kind == "top":
        k = min(strategy.k, probabilities.shape[1])
        keep = torch.zeros_like(probabilities, dtype=torch.bool)
        keep.scatter_(1, probabilities.topk(k, dim=1).indices, True)
    else:
        keep = probabilities >= strategy.threshold
        keep.scatter_(1, probabilities.argmax(dim=1, keepdim=True), True)
    kept = torch.where(keep, probabilities, torch.zeros_like(probabilities))
    return kept / kept.sum(dim=1, keepdim=True)


def mix_velocities(
    experts: Sequence[VelocityFn], weights: Tensor, x_t: Tensor, t: Tensor
) -> Tensor:
    """Σ_k weights[:, k]·expert_k(x_t, t), evaluating each expert only where its weight is > 0."""
    velocity = torch.zeros_like(x_t)
    shape = (-1, *([1] * (x_t.dim() - 1)))
    for k, expert in enumerate(experts):
        rows = torch.nonzero(weights[:, k] > 0).flatten()
        if len(rows):
            w = weights[rows, k].to(x_t.dtype).reshape(shape)
            velocity.index_add_(0, rows, w * expert(x_t[rows], t[rows]))
    return velocity


def routed_velocity(
    experts: Sequence[VelocityFn],
    router: RouterFn,
    strategy: Strategy,
    *,
    generator: torch.Generator | None = None,
) -> VelocityFn:
    """The velocity function of the expert ensemble under `strategy`.

    Under pick1 the function keeps the first call's draw, so one function serves one batch's
    trajectory: the router runs once, and each row stays with its expert to the end.
    """
    picked: list[Tensor] = []

    def velocity(x_t: Tensor, t: Tensor) -> Tensor:
        if picked:
            if len(picked[0]) != len(x_t):
                raise ConfigError("a pick1 velocity follows one batch; build one per batch")
            return mix_velocities(experts, picked[0], x_t, t)
        probabilities = torch.softmax(router(x_t, t).to(torch.float64), dim=1)
        weights = expert_weights(probabilities, strategy, generator=generator)
        if strategy.kind == "pick":
            picked.append(weights)
        return mix_velocities(experts, weights, x_t, t)

    return velocity


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplerConfig:
    """`steps` ODE steps from t = 1 to t = 0, by `method` euler or heun (two evaluations a step)."""

    steps: int = 50
    method: str = "euler"

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError("sampling needs at least one step")
        if self.method not in ("euler", "heun"):
            raise ConfigError(f"unknown sampler {self.method!r}; use euler or heun")


@torch.no_grad()
def integrate(velocity: VelocityFn, noise: Tensor, config: SamplerConfig) -> Tensor:
    """Carry `noise` (t = 1) along the flow to t = 0."""
    times = torch.linspace(1.0, 0.0, config.steps + 1, dtype=torch.float64)
    x = noise
    for t_now, t_next in zip(times[:-1].tolist(), times[1:].tolist(), strict=True):
        dt = t_next - t_now
        now = torch.full((len(x),), t_now, dtype=x.dtype)
        slope = velocity(x, now)
        if config.method == "heun":
            predicted = x + dt * slope
            slope = 0.5 * (slope + velocity(predicted, torch.full_like(now, t_next)))
        x = x + dt * slope
    return x


def sample(
    experts: Sequence[VelocityFn],
    router: RouterFn,
    noise: Tensor,
    *,
    strategy: Strategy,
    sampler: SamplerConfig,
    seed: int = 0,
) -> Tensor:
    """Images from the ensemble: `noise` [B, ...] integrated under `strategy`."""
    generator = torch.Generator().manual_seed(seed)
    return integrate(
        routed_velocity(experts, router, strategy, generator=generator), noise, sampler
    )
