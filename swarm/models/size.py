"""How big a model is, from its config alone: a joiner checks a stranger's spec before building.

A remote manifest chooses the model, so building it to count its parameters would let the
manifest's author allocate the joiner's memory. The built-ins' counts are closed formulas of
their configs (tests check them against built models); a plugin or trusted import-path model
has no formula, so its factory runs under `torch.device("meta")`: parameters get shapes and no
storage. A factory that allocates real tensors explicitly (device="cpu") defeats that; such a
factory is the local user's own choice (registry.py trusts nothing else).
"""

from __future__ import annotations

from typing import Any

from .external import ExternalModelConfig
from .gpt import GPTConfig
from .hf import HFModelConfig
from .mlp import MLPConfig
from .registry import FactoryModelConfig


def parameter_count(config: GPTConfig | MLPConfig | FactoryModelConfig | Any) -> int:
    """Trainable parameters of the model `config` builds (tied weights once), without building."""
    if isinstance(config, GPTConfig):
        return _gpt_parameters(config)
    if isinstance(config, MLPConfig):
        return _mlp_parameters(config)
    if isinstance(config, FactoryModelConfig):
        return _meta_parameters(config)
    if isinstance(config, ExternalModelConfig):  # counted by its creator, who holds it
        return config.params
    if isinstance(config, HFModelConfig):
        return config.meta_parameters()
    raise TypeError(f"cannot size a model from {type(config).__name__}")


def _gpt_parameters(c: GPTConfig) -> int:
    e = c.n_embd
    # per block: 2 LayerNorms (2e each), qkv (3e² + 3e), attention proj (e² + e),
    # MLP fc (4e² + 4e) and proj (4e² + e); the LM head shares the token embedding
    block = 12 * e * e + 13 * e
    return c.vocab_size * e + c.block_size * e + c.n_layer * block + 2 * e


def _mlp_parameters(c: MLPConfig) -> int:
    widths = [c.in_features] + [c.hidden] * c.depth + [c.num_classes]
    return sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))


def _meta_parameters(config: FactoryModelConfig) -> int:
    import torch

    with torch.device("meta"):
        model = config.factory(**dict(config.settings))
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model {config.source} returned {type(model).__name__}, not a Module")
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total
