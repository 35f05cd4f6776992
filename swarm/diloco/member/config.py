"""Hyperparameters of DiLoCo's two optimizers (defaults from DiLoCo / OpenDiLoCo / INTELLECT-1)."""

from __future__ import annotations

from dataclasses import dataclass

from peertrain.swarm.models.config import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class InnerConfig:
    """AdamW on each member's own shard, `steps` (H) per round, linear warm-up, then constant.

    `total_steps` (optional) turns on cosine decay to `min_lr` after warm-up; weight decay applies
    to matrices only (not biases, gains), as in nanoGPT.
    """

    steps: int = 100
    batch_size: int = 16
    lr: float = 4e-4
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    total_steps: int | None = None
    min_lr: float = 0.0
    grad_clip: float | None = 1.0
    accumulation: int = 1  # micro-batches per step: a step sees batch_size × accumulation samples
    precision: str = "fp32"  # autocast for forward and loss: fp32 | bf16 | fp16 (swarm/devices.py)

    def __post_init__(self) -> None:
        if self.accumulation < 1:
            raise ConfigError("accumulation must be at least 1")
        if self.steps < 1 or self.batch_size < 1:
            raise ConfigError("inner steps (H) and batch_size must be at least 1")
        if self.lr <= 0 or self.warmup_steps < 0:
            raise ConfigError("inner lr must be positive and warmup_steps non-negative")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"betas must be two numbers in [0, 1), got {self.betas}")


@dataclass(frozen=True, slots=True, kw_only=True)
class OuterConfig:
    """SGD with (Nesterov) momentum applied to θ_global with the aggregated pseudo-gradient."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True

    def __post_init__(self) -> None:
        if self.lr <= 0 or not 0 <= self.momentum < 1:
            raise ConfigError("outer lr must be positive and momentum in [0, 1)")


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamingConfig:
    """Streaming DiLoCo (Douillard et al. 2025): `fragments` P groups of layers syncing in turn,
    each outer step landing `overlap` τ inner steps after its fragment was sent and merged as
    θ_local ← mix·θ_local + (1 − mix)·θ_global; `eager` applies the member's own outer gradient
    to its local fragment at once (Kale et al. 2025). P=1, τ=0, mix=0 is plain DiLoCo."""

    fragments: int = 1
    overlap: int = 0
    mix: float = 0.0
    eager: bool = False

    def __post_init__(self) -> None:
        if self.fragments < 1 or self.overlap < 0:
            raise ConfigError("fragments must be at least 1 and overlap non-negative")
        if not 0 <= self.mix < 1:
            raise ConfigError(f"mix must be in [0, 1), got {self.mix}")

    def check(self, inner_steps: int) -> None:
        """The schedule must fit H: whole strides, and an outer step that lands before its
        fragment's next sync."""
        if inner_steps % self.fragments:
            raise ConfigError(
                f"inner steps ({inner_steps}) must be a multiple of fragments ({self.fragments})"
            )
        if self.overlap >= inner_steps:
            raise ConfigError(f"overlap ({self.overlap}) must be below inner steps ({inner_steps})")
