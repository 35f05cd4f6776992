"""Byzantine attacks on outer updates, as hooks on an otherwise ordinary node.

A Byzantine node trains honestly, then passes its outgoing update through an `Attack` before
sending it: `sent = attack(update, context)`. Nothing else about the node changes, so tests and
`swarm local --byzantine K --attack NAME` exercise the real code paths. Attacks that need the
honest updates of the round (ALIE, IPM: the strongest, omniscient threat model of their papers)
read `context.honest` when the caller can supply it and fall back to the node's own update.

    name          sends
    sign-flip     −g
    sign-flip-10  −10·g
    scaled        1000·g (a mean follows it: validation's norm bound must refuse it)
    noise         g + N(0, (scale·rms(g))²), scale = 100 by default (norm ≈ 100·‖g‖)
    alie          μ − z·σ per coordinate (Baruch et al. 2019), z from n and f (see `alie_z`)
    ipm           −ε · mean(honest), ε = 0.1 (Xie et al. 2019, inner-product manipulation)
    random        a random direction with the norm of g
    nan           all NaN (validation must reject it)

Randomised attacks draw from `context.generator` so a seeded run is reproducible.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .errors import UnknownAttack


@dataclass(frozen=True, slots=True, kw_only=True)
class AttackContext:
    """What a Byzantine node knows when it forges its update for one round."""

    num_workers: int  # n: everyone contributing to the round, Byzantine included
    num_byzantine: int  # f
    honest: Sequence[torch.Tensor] | None = None  # the honest updates of the round, if seen
    generator: torch.Generator | None = None


class Attack(Protocol):
    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor: ...


def _honest_stack(update: torch.Tensor, context: AttackContext) -> torch.Tensor:
    """The honest updates as a (k, d) stack, or the node's own update alone if none are known."""
    if context.honest:
        return torch.stack(list(context.honest))
    return update.unsqueeze(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SignFlip:
    """Send −scale·g: the right size, the wrong way."""

    scale: float = 1.0

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        return update * -self.scale


@dataclass(frozen=True, slots=True, kw_only=True)
class GaussianNoise:
    """Send g plus isotropic noise `scale` times the update's root-mean-square value."""

    scale: float = 100.0

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        rms = update.norm() / math.sqrt(max(update.numel(), 1))
        noise = torch.randn(update.shape, generator=context.generator, dtype=update.dtype)
        return update + noise * (self.scale * rms)


def alie_z(num_workers: int, num_byzantine: int) -> float:
    """ALIE's z_max: with s = ⌊n/2 + 1⌋ − f supporters needed, z = Φ⁻¹((n − s)/n)."""
    supporters = num_workers // 2 + 1 - num_byzantine
    quantile = (num_workers - supporters) / num_workers
    quantile = min(max(quantile, 1e-6), 1 - 1e-6)  # f ≥ n/2 leaves no bound; keep z finite
    return statistics.NormalDist().inv_cdf(quantile)


@dataclass(frozen=True, slots=True, kw_only=True)
class ALittleIsEnough:
    """Send μ − z·σ (coordinate-wise mean and std of the honest updates), small enough to hide in
    the honest spread. `z=None` uses `alie_z(n, f)`. Without honest updates to look at, the
    node uses its own: μ = g and σ = |g| (a crude guess; the omniscient form is the real test)."""

    z: float | None = None

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        z = alie_z(context.num_workers, context.num_byzantine) if self.z is None else self.z
        stack = _honest_stack(update, context)
        if stack.shape[0] >= 2:
            return stack.mean(dim=0) - z * stack.std(dim=0)
        return update - z * update.abs()


@dataclass(frozen=True, slots=True, kw_only=True)
class InnerProductManipulation:
    """Send −ε times the honest mean, so the aggregate's inner product with it shrinks."""

    epsilon: float = 0.1

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        return _honest_stack(update, context).mean(dim=0) * -self.epsilon


@dataclass(frozen=True, slots=True, kw_only=True)
class RandomVector:
    """Send a uniformly random direction with the update's own norm (norm checks pass)."""

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        direction = torch.randn(update.shape, generator=context.generator, dtype=update.dtype)
        return direction * (update.norm() / direction.norm().clamp_min(1e-30))


@dataclass(frozen=True, slots=True, kw_only=True)
class NaNUpdate:
    """Send NaN everywhere: a crashed or hostile node; validation must catch it."""

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        return torch.full_like(update, float("nan"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Scaled:
    """Send factor·g: the right way, far too long (a mean is dragged wherever it points)."""

    factor: float = 1000.0

    def __call__(self, update: torch.Tensor, context: AttackContext) -> torch.Tensor:
        return update * self.factor


ATTACKS: dict[str, Callable[..., Attack]] = {
    "sign-flip": SignFlip,
    "sign-flip-10": lambda **options: SignFlip(**{"scale": 10.0, **options}),
    "scaled": Scaled,
    "noise": GaussianNoise,
    "alie": ALittleIsEnough,
    "ipm": InnerProductManipulation,
    "random": RandomVector,
    "nan": NaNUpdate,
}


def build_attack(name: str, **options: Any) -> Attack:
    """The attack called `name` (a key of `ATTACKS`), configured with `options`."""
    if name not in ATTACKS:
        raise UnknownAttack(f"unknown attack {name!r}; choose one of {sorted(ATTACKS)}")
    try:
        return ATTACKS[name](**options)
    except TypeError as error:
        raise UnknownAttack(f"attack {name!r}: {error}") from None
