"""Models that runs train, built from a manifest's (name, settings) without any download."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from .config import ConfigError, config_from_dict, config_to_dict
from .external import ExternalModelConfig, external_model_name, is_external
from .gpt import GPT, GPT25MConfig, GPTConfig, sample_text
from .hf import HFModelConfig, hf_model_config, is_hf, resolve_hf
from .mlp import MLPClassifier, MLPConfig
from .registry import ENTRY_POINT_GROUP, FactoryModelConfig, factory_config, trust_import

MODEL_CONFIGS: dict[str, type[GPTConfig] | type[MLPConfig]] = {
    "gpt": GPTConfig,
    "gpt-25m": GPT25MConfig,  # the GPT at 29.5 M parameters, for BPE token files
    "mlp": MLPConfig,
}


def model_config(
    name: str, settings: Mapping[str, Any] | None = None
) -> GPTConfig | MLPConfig | FactoryModelConfig | ExternalModelConfig | HFModelConfig:
    """The config of model `name` with `settings` applied: a built-in (`MODEL_CONFIGS`), an
    installed plugin, a trusted `package.module:factory` (see registry.py), a model a user's
    script holds (`external:<fingerprint>`, see external.py) or a transformers causal LM
    (`hf:<model_type>`, see hf.py)."""
    if name in MODEL_CONFIGS:
        return config_from_dict(
            MODEL_CONFIGS[name], settings or {}, what=f"model {name!r}", under="model_settings"
        )
    if is_external(name):
        return ExternalModelConfig.of(name, settings or {})
    if is_hf(name):
        return hf_model_config(name, settings or {})
    found = factory_config(name, settings or {})
    if found is None:
        raise ConfigError(
            f"unknown model {name!r}; choose one of {', '.join(MODEL_CONFIGS)}, an installed "
            f"plugin ({ENTRY_POINT_GROUP} entry point), an import path package.module:factory "
            "or a transformers causal LM hf:PATH_OR_CONFIG"
        )
    return found


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "GPT",
    "MODEL_CONFIGS",
    "ExternalModelConfig",
    "FactoryModelConfig",
    "ConfigError",
    "GPT25MConfig",
    "GPTConfig",
    "HFModelConfig",
    "MLPClassifier",
    "MLPConfig",
    "config_from_dict",
    "config_to_dict",
    "count_parameters",
    "external_model_name",
    "is_hf",
    "model_config",
    "resolve_hf",
    "sample_text",
    "trust_import",
]
