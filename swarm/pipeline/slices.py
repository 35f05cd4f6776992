"""Cutting a model into pipeline stages.

Every server of a stage builds its slice from the same config and seed, so all of them start with
identical parameters without downloading anything; the full model is built once and sliced, so a
pipeline of S stages starts from exactly the weights a single-process model with that seed has.
"""

from __future__ import annotations

from peertrain.swarm.models.mlp import MLPConfig
from torch import nn


def mlp_stage_modules(config: MLPConfig, num_stages: int, *, seed: int = 0) -> list[nn.Module]:
    """The MLP classifier as `num_stages` contiguous slices; the last one ends with the head."""
    model = config.build(seed=seed)
    layers: list[nn.Module] = [nn.Sequential(layer, nn.ReLU()) for layer in model.hidden]
    layers.append(model.head)
    if not 1 <= num_stages <= len(layers):
        raise ValueError(f"an MLP of {len(layers)} layers cannot be cut into {num_stages} stages")
    bounds = [round(i * len(layers) / num_stages) for i in range(num_stages + 1)]
    return [nn.Sequential(*layers[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def mlp_stage_module(config: MLPConfig, num_stages: int, stage: int, *, seed: int = 0) -> nn.Module:
    """One stage's slice (what a server builds when it joins or moves to `stage`)."""
    return mlp_stage_modules(config, num_stages, seed=seed)[stage]
