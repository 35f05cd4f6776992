"""What a SWARM pipeline run trains, as the manifest's opaque `spec`: canonical, strictly checked.

The manifest names a run by the hash of its bytes (crdt/manifest.py), so the spec encodes
canonically, as the DiLoCo spec does (diloco/member/run_spec.py). Every server builds its stage
slice from the same model config and seed (slices.py), so servers of one stage start identical
without downloading anything; every trainer builds the same dataset and takes its own shard.

Any model offering `pipeline_parts()` is cut (slices.py: the GPT and the digits MLP today); a
model that cannot be cut into `stages` slices is refused here, at `run create`, not later on
every joining server.
`base_seconds` is a testing knob: each server pads every call to `base_seconds · work / speed`
(its `speed` is given when it joins), which makes servers heterogeneous on one machine.
`static_seconds` > 0 starts the run with a fixed one-server-per-stage pipeline for that long
(the baseline `static_throughput` of the report), then switches to SWARM wiring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..models.config import ConfigError
from ..run_spec import RunSpec
from .boundary import BOUNDARY_CODECS
from .slices import pipeline_blocks
from .wiring import BACKWARD_COST


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSpec(RunSpec):
    KIND: ClassVar[str] = "pipeline spec"

    model: str = "mlp"  # mlp or gpt (any model offering pipeline_parts), cut into `stages` slices
    dataset: str = "digits"  # digits, or text for a gpt
    stages: int = 3  # pipeline stages the model is cut into (at least 2)
    batch_size: int = 16  # rows per microbatch
    target_batch: int = 128  # samples a stage accumulates (over its servers) before it steps
    lr: float = 3e-3  # learning rate of each stage's optimizer
    codec: str = "int8"  # at stage boundaries: int8 blockwise, as in the paper
    in_flight: int = 8  # microbatches in flight per trainer
    microbatches: int = 0  # per trainer; 0: until stopped
    rebalance_period: float = 30.0  # seconds between rebalancing decisions; 0: never
    static_seconds: float = 0.0  # a fixed one-server-per-stage phase first (the baseline)
    base_seconds: float = 0.0  # artificial seconds per forward sample at speed 1 (testing)
    checkpoint_every: int = 10  # averaging rounds between a server's stage checkpoints; 0: never
    seed: int = 0  # seed of every stage's initial weights and the data order

    def __post_init__(self) -> None:
        if self.codec not in BOUNDARY_CODECS:
            raise ConfigError(
                f"codec must be one of {', '.join(BOUNDARY_CODECS)}, got {self.codec!r}"
            )
        if self.stages < 2:
            raise ConfigError("a pipeline has at least 2 stages (--stages)")
        if min(self.batch_size, self.target_batch, self.in_flight) < 1 or self.microbatches < 0:
            raise ConfigError("batch_size, target_batch and in_flight must be at least 1")
        knobs = (self.lr, self.rebalance_period, self.static_seconds, self.base_seconds)
        if min(*knobs, self.checkpoint_every) < 0:
            raise ConfigError(
                "lr, rebalance_period, static_seconds, base_seconds and checkpoint_every must "
                "be ≥ 0"
            )
        self._check_model()
        self.dataset_config()

    def _check_model(self) -> None:
        """A model the pipeline can cut into `stages` (slices.py), with a forward a stage may
        recompute on backward: the same output every time, so no dropout."""
        config = self.model_config()
        blocks = pipeline_blocks(config)
        if not self.stages <= blocks:
            raise ConfigError(
                f"the {self.model} model has {blocks} blocks: too few for {self.stages} stages "
                f"(set model_settings.{'n_layer' if self.model == 'gpt' else 'depth'})"
            )
        if getattr(config, "dropout", 0.0):
            raise ConfigError("a pipeline recomputes the forward on backward: set dropout to 0")
        context = getattr(config, "block_size", None)
        window = getattr(self.dataset_config(), "block_size", None)
        if context is not None and window is not None and window > context:
            raise ConfigError(
                f"the data's windows of {window} tokens exceed the model's block_size {context}"
            )

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> PipelineSpec:
        """From the CLI's settings; the default model is deep enough for `stages`, and a GPT
        trains on text cut to its block size unless told otherwise."""
        settings = dict(settings)
        stages = int(settings.get("stages", 3))
        model_settings = dict(settings.get("model_settings") or {})
        if settings.get("model", "mlp") == "gpt":
            model_settings.setdefault("n_layer", stages)
            settings.setdefault("dataset", "text")
            dataset_settings = dict(settings.get("dataset_settings") or {})
            dataset_settings.setdefault("block_size", model_settings.get("block_size", 64))
            settings["dataset_settings"] = dataset_settings
        else:
            model_settings.setdefault("depth", max(2, stages - 1))
        settings["model_settings"] = model_settings
        return cls.checked(settings)

    # -- what it builds -------------------------------------------------------------------------

    def demand(self, stage: int) -> float:
        """Compute per sample of `stage` in forward units: what rebalancing divides by capacity."""
        return BACKWARD_COST if stage == self.stages - 1 else 1.0 + BACKWARD_COST
