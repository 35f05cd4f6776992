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
from .pipeline_parts import Boundary, PipelineParts


@dataclass(frozen=True, slots=True, kw_only=True)
class MLPConfig:
    in_features: int = 64  # inputs per sample (64: the 8x8 digits)
    hidden: int = 64  # width of each hidden layer
    depth: int = 2  # hidden layers
    num_classes: int = 10  # classes of the output layer

    def __post_init__(self) -> None:
        if min(self.in_features, self.hidden, self.depth, self.num_classes) < 1:
            raise ConfigError("MLPConfig sizes must be positive")

    def build(self, *, seed: int = 0) -> MLPClassifier:
        return MLPClassifier(self, seed=seed)

    @property
    def pipeline_blocks(self) -> int:
        """How many blocks a SWARM pipeline may cut between: every layer, the head included."""
        return self.depth + 1


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

    def pipeline_parts(self) -> PipelineParts:
        """Every layer a block (hidden ones with their ReLU, the head last), no stem."""
        c = self.config
        blocks: list[nn.Module] = [nn.Sequential(layer, nn.ReLU()) for layer in self.hidden]
        widths = [c.in_features] + [c.hidden] * c.depth + [c.num_classes]
        boundaries = [Boundary(tail=(w,)) for w in widths]
        return PipelineParts(
            stem=None,
            blocks=[*blocks, self.head],
            head=None,
            input=boundaries[0],
            boundaries=boundaries,
            output=boundaries[-1],
        )
