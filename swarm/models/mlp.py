"""A small MLP classifier, sized for scikit-learn's bundled 8x8 digits: fast tests of whole runs.

A DiLoCo round on this model takes milliseconds, so tests can exercise many rounds, joins and
restarts with a model whose loss still clearly falls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class MLPConfig:
    in_features: int = 64
    hidden: int = 64
    depth: int = 2
    num_classes: int = 10

    def __post_init__(self) -> None:
        if min(self.in_features, self.hidden, self.depth, self.num_classes) < 1:
            raise ConfigError("MLPConfig sizes must be positive")

    def build(self, *, seed: int = 0) -> MLPClassifier:
        return MLPClassifier(self, seed=seed)


class MLPClassifier(nn.Module):
    """`forward(x, targets)` returns `(logits, loss)`, the same contract as `GPT`."""

    def __init__(self, config: MLPConfig, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        widths = [config.in_features] + [config.hidden] * config.depth
        with torch.device("meta"):  # initialised below from the seed, not from the global RNG
            pairs = zip(widths, widths[1:], strict=False)
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in pairs)
            self.head = nn.Linear(widths[-1], config.num_classes)
        self.to_empty(device="cpu")
        generator = torch.Generator().manual_seed(seed)
        for layer in [*self.hidden, self.head]:
            bound = layer.in_features**-0.5
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
            nn.init.zeros_(layer.bias)

    def forward(
        self, x: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        for layer in self.hidden:
            x = F.relu(layer(x))
        logits = self.head(x)
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss
