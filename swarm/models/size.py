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


# fp32 activations a training step holds, doubled: what backward keeps for each layer and the
# gradients flowing back through it are of the same size
_ACTIVATION_BYTES = 2 * 4


def activation_bytes(config: Any, *, batch: int, context: int | None = None) -> int:
    """Bytes a training step's activations take for a micro-batch of `batch` examples, from the
    config alone (on the high side), or 0 for a model that gives no estimate of its own.

    GPT (context T = block_size, width e, L layers, h heads, vocabulary V): per layer the saved
    inputs of its LayerNorms, qkv, attention output and projection, the MLP's 4e-wide hidden and
    activation (≈ 16·B·T·e) and the attention scores and probabilities (2·B·h·T²); then the
    logits, their log-softmax and gradient (3·B·T·V). MLP: each layer's input and output. A
    transformers model: the same GPT formula from its config's fields. An import-path model may
    say itself, as a factory attribute `activation_bytes(batch, **settings)`. `context`: the
    tokens per example the dataset cuts (else the model's own context length)."""
    if isinstance(config, GPTConfig):
        return _transformer_activations(
            batch, context or config.block_size, config.n_embd, config.n_layer, config.n_head,
            config.vocab_size,
        )  # fmt: skip
    if isinstance(config, MLPConfig):
        widths = config.in_features + 2 * config.hidden * config.depth + 3 * config.num_classes
        return _ACTIVATION_BYTES * batch * widths
    if isinstance(config, HFModelConfig):
        return _hf_activations(config, batch, context)
    estimate = getattr(getattr(config, "factory", None), "activation_bytes", None)
    if callable(estimate):
        return int(estimate(batch, **dict(config.settings)))
    return 0


def _transformer_activations(batch: int, t: int, e: int, layers: int, heads: int, v: int) -> int:
    per_layer = 16 * batch * t * e + 2 * batch * heads * t * t
    return _ACTIVATION_BYTES * (layers * per_layer + batch * t * e + 3 * batch * t * v)


def _hf_activations(config: HFModelConfig, batch: int, context: int | None) -> int:
    hf = config.hf_config()
    fields = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    if not all(isinstance(getattr(hf, name, None), int) for name in fields):
        return 0
    context = context or int(getattr(hf, "max_position_embeddings", 0) or 2048)
    return _transformer_activations(
        batch, context, hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads,
        hf.vocab_size,
    )  # fmt: skip
