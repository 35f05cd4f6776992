"""Hugging Face transformers causal LMs as run models: `--model hf:PATH_OR_CONFIG`, never the hub.

    hf:gpt2                       an architecture (a transformers `model_type`) with its defaults;
                                  `--set model_settings.n_layer=2` changes any config field
    hf:{"model_type": "llama", …} an inline config (JSON)
    hf:path/config.json           a config file
    hf:path/dir                   a `save_pretrained` folder: its config.json, and its weights
                                  (model.safetensors) as the run's initial state when present

The creator's node turns any of these into a spec of plain values (`resolve_hf`): model
`hf:<model_type>` and the config's fields as `model_settings`, so no path travels to peers. A
folder's weights are named by digest (`pretrained`); each member names the same folder with
`--model hf:DIR`, as with `--data`, and one with other weights is refused. Only architectures
built into transformers are accepted (no `auto_map`, no remote code), and every load runs with
HF_HUB_OFFLINE=1, so a run never downloads anything. The module wraps the transformers model in
our `forward(x, y) -> (logits, loss)` contract; export writes the inner model (export.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConfigError

HF_PREFIX = "hf:"
# config fields that describe a file, not an architecture: dropped from a spec
_NOISE = ("_name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype")
WEIGHTS = "model.safetensors"

_pretrained: dict[str, Path] = {}  # weights digest → the local folder holding them


def is_hf(name: str) -> bool:
    return name.startswith(HF_PREFIX)


def transformers_module():
    """transformers, imported offline; ConfigError naming the extra when it is missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # a run never downloads, whatever the user's shell says
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ImportError:
        raise ConfigError("hf: models need transformers: pip install 'peertrain[hf]'") from None
    return transformers


def resolve_hf(name: str, settings: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """`--model hf:PATH_OR_CONFIG` (+ settings) as a spec's (model, model_settings) of plain
    values; a folder with weights is offered for this process's builds (`offer_pretrained`)."""
    source = name.removeprefix(HF_PREFIX)
    config, folder = _read_source(source)
    config = {k: v for k, v in {**config, **dict(settings or {})}.items() if k not in _NOISE}
    model_type = config.pop("model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"model hf:{source[:80]}: the config names no model_type")
    if folder is not None and (folder / WEIGHTS).is_file():
        config["pretrained"] = offer_pretrained(folder)
    return HF_PREFIX + model_type, config


def _read_source(source: str) -> tuple[dict[str, Any], Path | None]:
    if source.lstrip().startswith("{"):
        return _json(source, "the inline config"), None
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model hf:{source}: the folder has no config.json")
        return _json((path / "config.json").read_text(), str(path / "config.json")), path
    if path.is_file():
        return _json(path.read_text(), str(path)), None
    if source.isidentifier() or source.replace("-", "_").isidentifier():
        return {"model_type": source}, None  # an architecture by name, its default config
    raise ConfigError(f"model hf:{source[:80]}: no such folder or file, and not a model_type")


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model hf: {what} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"model hf: {what} is not a JSON object")
    return value


def offer_pretrained(folder: Path | str) -> str:
    """Let this process's builds take weights from `folder` (the local user named it); their
    digest, which a spec names."""
    from ..data.corpus import file_digest

    folder = Path(folder).expanduser().absolute()
    digest = file_digest(folder / WEIGHTS)
    _pretrained[digest] = folder
    return digest


@dataclass(frozen=True, slots=True, kw_only=True)
class HFModelConfig:
    """A transformers causal LM of `model_type` with config fields `settings` (a spec's
    `model_settings`; `pretrained`: the digest of initial weights each member supplies)."""

    model_type: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "auto_map" in self.settings:
            raise ConfigError("hf: models run built-in transformers code only (no auto_map)")
        self.hf_config()  # an unknown architecture or setting fails when the spec is read

    @property
    def pretrained(self) -> str:
        return str(self.settings.get("pretrained", ""))

    def hf_config(self):
        transformers = transformers_module()
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        if self.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ConfigError(
                f"hf:{self.model_type} is no causal LM that transformers "
                f"{transformers.__version__} knows (e.g. gpt2, llama, qwen2, mistral)"
            )
        fields = {k: v for k, v in self.settings.items() if k != "pretrained"}
        defaults = transformers.AutoConfig.for_model(self.model_type).to_dict()
        unknown = sorted(set(fields) - set(defaults))
        if unknown:
            raise ConfigError(
                f"hf:{self.model_type} has no config field {', '.join(unknown)}; "
                f"its fields are: {', '.join(sorted(defaults))}"
            )
        return transformers.AutoConfig.for_model(self.model_type, **fields)

    def build(self, *, seed: int = 0) -> HFCausalLM:
        transformers = transformers_module()
        torch.manual_seed(seed)  # every member builds the same initial weights from the spec
        config = self.hf_config()
        if self.pretrained:
            folder = self._pretrained_folder()
            model = transformers.AutoModelForCausalLM.from_pretrained(
                folder, config=config, local_files_only=True
            )
        else:
            model = transformers.AutoModelForCausalLM.from_config(config)
        return HFCausalLM(model.float())

    def meta_parameters(self) -> int:
        """Trainable parameters, counted on the meta device (nothing allocated)."""
        with torch.device("meta"):
            model = transformers_module().AutoModelForCausalLM.from_config(self.hf_config())
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    def _pretrained_folder(self) -> Path:
        from ..data.corpus import file_digest

        folder = _pretrained.get(self.pretrained)
        if folder is None or file_digest(folder / WEIGHTS) != self.pretrained:
            raise ConfigError(
                f"this run starts from hf weights with digest {self.pretrained}: name your copy "
                "of the folder with --model hf:DIR"
            )
        return folder


def hf_model_config(name: str, settings: Mapping[str, Any]) -> HFModelConfig:
    return HFModelConfig(model_type=name.removeprefix(HF_PREFIX), settings=dict(settings))


class HFCausalLM(nn.Module):
    """A transformers causal LM behind our contract: `y` holds the next token of each `x`
    position (our batches are shifted already), so the loss is plain cross-entropy."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.hf_model = model

    def forward(self, x, y=None):
        logits = self.hf_model(input_ids=x, use_cache=False).logits
        if y is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())

    def save_pretrained(self, folder: str, **options: Any) -> None:
        self.hf_model.save_pretrained(folder, **options)
