"""What a run spec would cost this member, checked against the member's own budget first.

A run's spec is written by whoever created the run; a joiner must not let it decide how much
memory the joiner spends. `check_budget` sizes a spec from its configs alone (no model, no
dataset built: models/size.py) and refuses one over `--max-params` or `--max-memory`.

The memory figure is an estimate, deliberately on the high side: a DiLoCo member holds about
`BYTES_PER_PARAM` per parameter (fp32 weights, gradients, AdamW's two moments, θ_global, the
outer momentum, the error-feedback residual and one decoded update = 8 copies of 4 bytes), plus
the dataset (text is held as bytes and as a tensor: 2 × `max_bytes`), plus one training step's
activations for a micro-batch of `batch_size` (models/size.py `activation_bytes`: a spec whose
`batch_size` was 20,000,000 on the MLP passed a 1 GiB limit as 4.3 MiB and failed its first
inner step; on a real node the kernel's OOM killer ends the daemon, not just the run).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .errors import SpecOverBudget

DEFAULT_MAX_PARAMS = 200_000_000
BYTES_PER_PARAM = 8 * 4
SMALL_DATASET_BYTES = 4 << 20  # datasets with no size setting (digits: 0.5 MB)
FALLBACK_MACHINE_MEMORY = 8 << 30  # where the OS will not say


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecSize:
    params: int
    memory: int  # bytes, estimated


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBudget:
    """What this member agrees to hold for one run. `max_memory` 0: half this machine's memory."""

    max_params: int = DEFAULT_MAX_PARAMS
    max_memory: int = 0

    def memory_limit(self) -> int:
        return self.max_memory or machine_memory() // 2


def machine_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MACHINE_MEMORY


def spec_size(spec: Any) -> SpecSize:
    """The size of what `spec` (a RunSpec) builds, from its model and dataset configs (or its
    own `size()`, for a spec that builds something the model registry does not size)."""
    from .models.size import activation_bytes, parameter_count

    if hasattr(spec, "size"):
        params, memory = spec.size()
        return SpecSize(params=params, memory=memory)
    config = spec.model_config()
    params = parameter_count(config)
    batch = getattr(spec, "batch_size", 1)
    context = getattr(spec.dataset_config(), "block_size", None)
    activations = activation_bytes(config, batch=batch, context=context)
    memory = params * BYTES_PER_PARAM + _dataset_bytes(spec) + activations
    return SpecSize(params=params, memory=memory)


def _dataset_bytes(spec: Any) -> int:
    max_bytes = getattr(spec.dataset_config(), "max_bytes", None)
    return 2 * max_bytes if max_bytes is not None else SMALL_DATASET_BYTES


def check_budget(spec: Any, budget: RunBudget) -> SpecSize:
    """`spec_size(spec)`, or SpecOverBudget saying which limit it passes and how to raise it."""
    size = spec_size(spec)
    if size.params > budget.max_params:
        raise SpecOverBudget(
            f"this run's model has {size.params:,} parameters, over this node's limit of "
            f"{budget.max_params:,} (--max-params)"
        )
    limit = budget.memory_limit()
    if size.memory > limit:
        raise SpecOverBudget(
            f"this run would take about {size.memory / 2**20:,.0f} MiB (model, dataset and a "
            "training step's activations), over "
            f"this node's limit of {limit / 2**20:,.0f} MiB (--max-memory)"
        )
    return size
