"""A trained model leaves peertrain: a plain state_dict any torch user can load.

    safetensors  model.safetensors — tensors by parameter name, loadable with
                 `safetensors.torch.load_file` and `model.load_state_dict`, no peertrain import
    torch        model.pt — the same state_dict through `torch.save`
    hf           `save_pretrained` into the folder, for models that came from transformers

Each export writes `export.json` beside the weights: the run, round, model name and settings,
and the blake3 checksum of every file written, so a copy can be verified anywhere. Files are
written to a temporary name and renamed, so a crash never leaves a half-written export.

Tied weights (the GPT shares its embedding with its head) are written once per name, as
independent copies: safetensors refuses shared storage, and a plain state_dict has no ties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .models.config import ConfigError

FORMATS = ("safetensors", "torch", "hf")
SIDECAR = "export.json"


def export_model(
    model: nn.Module, out: Path, *, fmt: str = "safetensors", about: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write `model`'s weights to folder `out` in `fmt`; return the sidecar it wrote."""
    if fmt not in FORMATS:
        raise ConfigError(f"export format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "hf":
        written = _save_pretrained(model, out)
    else:
        # a transformers model is written as itself (swarm/models/hf.py wraps it), so its
        # state_dict loads into the class transformers builds from the sidecar's config
        state = plain_state_dict(getattr(model, "hf_model", model))
        name = "model.safetensors" if fmt == "safetensors" else "model.pt"
        _atomic(out / name, lambda tmp: _save(state, tmp, fmt))
        written = [name]
    sidecar = {
        "format": fmt,
        **(about or {}),
        "files": {name: _blake3(out / name) for name in written},
    }
    _atomic(out / SIDECAR, lambda tmp: tmp.write_text(json.dumps(sidecar, indent=2) + "\n"))
    return sidecar


def plain_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name, contiguous fp32 on the CPU, shared storage broken."""
    return {
        name: tensor.detach().to("cpu").contiguous().clone()
        for name, tensor in model.state_dict(keep_vars=False).items()
    }


def verify_export(out: Path) -> dict[str, Any]:
    """Check every file of an export against its sidecar; return the sidecar."""
    sidecar = json.loads((Path(out) / SIDECAR).read_text())
    for name, checksum in sidecar["files"].items():
        if _blake3(Path(out) / name) != checksum:
            raise ValueError(f"{name} does not match its checksum in {SIDECAR}")
    return sidecar


def _save(state: dict[str, torch.Tensor], path: Path, fmt: str) -> None:
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)


def _save_pretrained(model: nn.Module, out: Path) -> list[str]:
    save = getattr(model, "save_pretrained", None)
    if save is None:
        raise ConfigError(
            f"--format hf needs a transformers model; this run's is {type(model).__name__}: "
            "export it as safetensors"
        )
    before = set(os.listdir(out))
    save(str(out), safe_serialization=True)
    return sorted(set(os.listdir(out)) - before - {SIDECAR}) or sorted(
        n for n in os.listdir(out) if n != SIDECAR
    )


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _blake3(path: Path) -> str:
    import blake3

    digest = blake3.blake3()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
