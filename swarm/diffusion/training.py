"""Training one expert (flow matching on its cluster) or the router (which cluster made x_t?).

An expert never sees another cluster's data, gradients or weights: it is an ordinary diffusion
model trained on a subset. The router is a classifier of noised samples: for x_0 from cluster k and
t ~ U(0, 1) it learns p(k | x_t, t) by cross-entropy. Both use AdamW with linear warm-up and cosine
decay; each trainer is a step at a time (`step()`) so a DiLoCo group can wrap its inner loop, and
all randomness (batches, t, ε) comes from one seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .flow import RectifiedFlow, flow_matching_loss, noised


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """AdamW, `warmup_steps` linear warm-up, cosine decay to `min_lr` at `steps`."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ConfigError("steps and batch_size must be at least 1")
        if self.lr <= 0 or not 0 <= self.min_lr <= self.lr or self.warmup_steps < 0:
            raise ConfigError("need lr > 0, 0 <= min_lr <= lr and warmup_steps >= 0")

    def lr_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps))
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


class _Trainer:
    def __init__(self, model: nn.Module, images: Tensor, config: TrainConfig) -> None:
        if len(images) == 0:
            raise ConfigError("cannot train on an empty cluster")
        self.model, self.images, self.config = model, images, config
        self.generator = torch.Generator().manual_seed(config.seed)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.steps_done = 0

    def _batch_loss(self, rows: Tensor) -> Tensor:
        raise NotImplementedError

    def step(self) -> float:
        """One optimizer step on a fresh batch; returns its loss."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr_at(self.steps_done)
        rows = torch.randint(len(self.images), (self.config.batch_size,), generator=self.generator)
        self.model.train()
        loss = self._batch_loss(rows)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.steps_done += 1
        return loss.item()

    def train(self, steps: int | None = None) -> list[float]:
        """`steps` (default: the rest of `config.steps`) steps; the loss of each."""
        remaining = self.config.steps - self.steps_done if steps is None else steps
        return [self.step() for _ in range(remaining)]


class ExpertTrainer(_Trainer):
    """Flow matching on one cluster's images."""

    def __init__(
        self,
        model: nn.Module,
        images: Tensor,
        config: TrainConfig,
        *,
        schedule: RectifiedFlow | None = None,
    ) -> None:
        super().__init__(model, images, config)
        self.schedule = schedule or RectifiedFlow()

    def _batch_loss(self, rows: Tensor) -> Tensor:
        return flow_matching_loss(
            self.model, self.images[rows], generator=self.generator, schedule=self.schedule
        )


class RouterTrainer(_Trainer):
    """Cross-entropy of the router's logits at (x_t, t) against the cluster of x_0."""

    def __init__(
        self,
        model: nn.Module,
        images: Tensor,
        clusters: Tensor,
        config: TrainConfig,
        *,
        schedule: RectifiedFlow | None = None,
    ) -> None:
        super().__init__(model, images, config)
        self.clusters = clusters
        self.schedule = schedule or RectifiedFlow()

    def _batch_loss(self, rows: Tensor) -> Tensor:
        x0 = self.images[rows]
        t = torch.rand(len(rows), generator=self.generator)
        eps = torch.randn(x0.shape, generator=self.generator)
        logits = self.model(noised(self.schedule, x0, eps, t), t)
        return F.cross_entropy(logits, self.clusters[rows])


@torch.no_grad()
def router_accuracy(
    router: nn.Module,
    images: Tensor,
    clusters: Tensor,
    *,
    t: float,
    seed: int = 0,
    schedule: RectifiedFlow | None = None,
) -> float:
    """Top-1 accuracy of the router on `images` noised to time `t` (fresh noise from `seed`)."""
    schedule = schedule or RectifiedFlow()
    eps = torch.randn(images.shape, generator=torch.Generator().manual_seed(seed))
    times = torch.full((len(images),), t)
    router.eval()
    logits = torch.cat(
        [
            router(noised(schedule, x, e, s), s)
            for x, e, s in zip(images.split(512), eps.split(512), times.split(512), strict=True)
        ]
    )
    return float((logits.argmax(dim=1) == clusters).float().mean())
