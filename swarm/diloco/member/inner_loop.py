"""The inner loop: plain AdamW training on one member's shard, read top to bottom.

Nothing here knows about rounds, peers or pseudo-gradients; `DiLoCoMember` calls `run(H)` and looks
at the parameters before and after. The step counter is global across rounds (it drives the learning
rate schedule and which batch comes next), and the AdamW state persists across rounds, as in DiLoCo.
Synchronous torch code: the daemon calls it through `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from peertrain.swarm.data.batches import Batches
from peertrain.swarm.devices import autocast, to_device
from peertrain.swarm.diloco.member.config import InnerConfig
from torch import nn


@dataclass(frozen=True, slots=True, kw_only=True)
class InnerReport:
    steps: int
    first_loss: float
    last_loss: float
    mean_loss: float
    samples: int
    seconds: float


def learning_rate(config: InnerConfig, step: int) -> float:
    """Linear warm-up to `lr`, then constant, or cosine down to `min_lr` if `total_steps` is set."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.total_steps is None:
        return config.lr
    progress = min(
        1.0, (step - config.warmup_steps) / max(1, config.total_steps - config.warmup_steps)
    )
    return config.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (config.lr - config.min_lr)


def build_adamw(model: nn.Module, config: InnerConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only (not on biases and norm gains)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps)


class InnerLoop:
    def __init__(
        self,
        model: nn.Module,
        batches: Batches,
        config: InnerConfig,
        *,
        device: torch.device | None = None,
    ) -> None:
        self.model = model
        self.batches = batches
        self.config = config
        self.device = device or next(model.parameters()).device
        self.optimizer = build_adamw(model, config)
        self.step = 0

    def reset_optimizer(self, state: Mapping[str, Any] | None) -> None:
        """A fresh AdamW, holding `state` (a state_dict) when given: a member adopting a state."""
        self.optimizer = build_adamw(self.model, self.config)
        if state is not None:
            self.optimizer.load_state_dict(copy.deepcopy(dict(state)))

    def run(self, steps: int, stop: Callable[[], bool] | None = None) -> InnerReport:
        """Train for `steps` steps, fewer if `stop()` says so before one; returns the losses seen
        (on training batches) and the steps taken."""
        self.model.train()
        started = time.perf_counter()
        losses: list[float] = []
        for _ in range(steps):
            if stop is not None and stop():
                break
            lr = learning_rate(self.config, self.step)
            for group in self.optimizer.param_groups:
                group["lr"] = lr

            self.optimizer.zero_grad(set_to_none=True)
            loss = self._accumulate_gradients()
            if self.config.grad_clip is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
            self.optimizer.step()

            self.step += 1
            losses.append(loss)
        steps = len(losses)
        return InnerReport(
            steps=steps,
            first_loss=losses[0] if losses else math.nan,
            last_loss=losses[-1] if losses else math.nan,
            mean_loss=sum(losses) / len(losses) if losses else math.nan,
            samples=steps * self.batches.batch_size * self.config.accumulation,
            seconds=time.perf_counter() - started,
        )

    def micro_batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch `index` of this member's shard (a node of several ranks splits them)."""
        return self.batches.batch(index)

    def _accumulate_gradients(self) -> float:
        """Forward and backward over `accumulation` micro-batches (autocast per the config);
        the step's mean loss. Micro-batch k of step s is batch s·A + k, so A=1 is unchanged."""
        parts = self.config.accumulation
        total = 0.0
        for k in range(parts):
            x, y = self.micro_batch(self.step * parts + k)
            x, y = to_device(x, self.device), to_device(y, self.device)
            with autocast(self.device, self.config.precision):
                _, loss = self.model(x, y)
            (loss.float() / parts).backward()
            total += loss.item()
        return total / parts


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean loss over `batches`, weighted by batch size."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for x, y in batches:
        _, loss = model(to_device(x, device), to_device(y, device))
        total += loss.item() * len(x)
        count += len(x)
    model.train(was_training)
    return total / count
