"""What a SWARM pipeline run trains, as the manifest's opaque `spec`: canonical, strictly checked.

The manifest names a run by the hash of its bytes (crdt/manifest.py), so the spec encodes
canonically, as the DiLoCo spec does (swarm/diloco/run_spec.py). Every server builds its stage
slice from the same model config and seed (slices.py), so servers of one stage start identical
without downloading anything; every trainer builds the same dataset and takes its own shard.

Only the MLP classifier on digits is sliced today (slices.py); a model that cannot be cut into
`stages` slices is refused here, at `run create`, not later on every joining server.
`base_seconds` is a testing knob: each server pads every call to `base_seconds · work / speed`
(its `speed` is given when it joins), which makes servers heterogeneous on one machine.
`static_seconds` > 0 starts the run with a fixed one-server-per-stage pipeline for that long
(the baseline `static_throughput` of the report), then switches to SWARM wiring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..models.config import ConfigError
from ..run_spec import RunSpec
from .boundary import BOUNDARY_CODECS
from .wiring import BACKWARD_COST


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSpec(RunSpec):
    KIND: ClassVar[str] = "pipeline spec"

    model: str = "mlp"
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = "digits"
    dataset_settings: Mapping[str, Any] = field(default_factory=dict)
    stages: int = 3
    batch_size: int = 16  # rows per microbatch
    target_batch: int = 128  # samples a stage accumulates (over its servers) before it steps
    lr: float = 3e-3
    codec: str = "int8"  # at stage boundaries: int8 blockwise, as in the paper
    in_flight: int = 8  # microbatches in flight per trainer
    microbatches: int = 0  # per trainer; 0: until stopped
    rebalance_period: float = 30.0  # seconds between rebalancing decisions; 0: never
    static_seconds: float = 0.0  # a fixed one-server-per-stage phase first (the baseline)
    base_seconds: float = 0.0  # artificial seconds per forward sample at speed 1 (testing)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.codec not in BOUNDARY_CODECS:
            raise ConfigError(
                f"codec must be one of {', '.join(BOUNDARY_CODECS)}, got {self.codec!r}"
            )
        if self.stages < 2:
            raise ConfigError("a pipeline has at least 2 stages (--stages)")
        if min(self.batch_size, self.target_batch, self.in_flight) < 1 or self.microbatches < 0:
            raise ConfigError("batch_size, target_batch and in_flight must be at least 1")
        if min(self.lr, self.rebalance_period, self.static_seconds, self.base_seconds) < 0:
            raise ConfigError("lr, rebalance_period, static_seconds and base_seconds must be ≥ 0")
        if self.model != "mlp":
            raise ConfigError(f"swarm runs slice the `mlp` model only, not {self.model!r}")
        config = self.model_config()
        if not self.stages <= config.depth + 1:
            raise ConfigError(
                f"an MLP of depth {config.depth} has {config.depth + 1} layers: too few for "
                f"{self.stages} stages (set model_settings.depth)"
            )
        self.dataset_config()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> PipelineSpec:
        """From the CLI's settings; the default model is deep enough for `stages`."""
        settings = dict(settings)
        stages = int(settings.get("stages", 3))
        model_settings = dict(settings.get("model_settings") or {})
        model_settings.setdefault("depth", max(2, stages - 1))
        settings["model_settings"] = model_settings
        return cls(**settings)

    # -- what it builds -------------------------------------------------------------------------

    def demand(self, stage: int) -> float:
        """Compute per sample of `stage` in forward units: what rebalancing divides by capacity."""
        return BACKWARD_COST if stage == self.stages - 1 else 1.0 + BACKWARD_COST
