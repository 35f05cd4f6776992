"""A trained model leaves peertrain: a plain state_dict any torch user can load.

    safetensors  model.safetensors — tensors by parameter name, loadable with
                 `safetensors.torch.load_file` and `model.load_state_dict`, no peertrain import
    torch        model.pt — the same state_dict through `torch.save`
    hf           `save_pretrained` into the folder, for models that came from transformers

Each export writes `export.json` beside the weights: the run, round, model name and settings,
and the blake3 checksum of every file written, so a copy can be verified anywhere. The same
facts (strings) are the safetensors file's own metadata, so the weights name their run without
the sidecar. Files are written to a temporary name and renamed, so a crash never leaves a
half-written export.

Tied weights (the GPT shares its embedding with its head) are written once: a second name of
the same tensor is left out of model.safetensors and listed under `tied` (alias: kept name) in
the sidecar and the metadata; `safetensors.torch.load_model(model, path)` or
`load_state_dict(state, strict=False)` restores it, as the model ties them itself. model.pt
keeps both names on one storage (torch.save writes it once).
"""

from __future__ import annotations

import json
import os
import shutil
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
        tied = tied_names(state)
        name = "model.safetensors" if fmt == "safetensors" else "model.pt"
        about = {**(about or {}), **({"tied": tied} if tied else {})}
        _atomic(out / name, lambda tmp: _save(state, tmp, fmt, about))
        written = [name]
    sidecar = {
        "format": fmt,
        **(about or {}),
        "files": {name: _blake3(out / name) for name in written},
    }
    _atomic(out / SIDECAR, lambda tmp: tmp.write_text(json.dumps(sidecar, indent=2) + "\n"))
    return sidecar


def plain_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name, contiguous on the CPU and apart from the model's
    own storage; names of one tensor (tied weights) stay one tensor."""
    copies: dict[tuple[int, torch.Size, torch.dtype], torch.Tensor] = {}
    state = {}
    for name, tensor in model.state_dict(keep_vars=False).items():
        key = (tensor.data_ptr(), tensor.shape, tensor.dtype)
        if key not in copies or tensor.numel() == 0:
            copies[key] = tensor.detach().to("cpu").contiguous().clone()
        state[name] = copies[key]
    return state


def tied_names(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """{alias: first name} for every name whose tensor an earlier name already holds."""
    first: dict[int, str] = {}
    tied = {}
    for name, tensor in state.items():
        if tensor.numel() and id(tensor) in first:
            tied[name] = first[id(tensor)]
        else:
            first.setdefault(id(tensor), name)
    return tied


def verify_export(out: Path) -> dict[str, Any]:
    """Check every file of an export against its sidecar; return the sidecar."""
    sidecar = json.loads((Path(out) / SIDECAR).read_text())
    for name, checksum in sidecar["files"].items():
        if _blake3(Path(out) / name) != checksum:
            raise ValueError(f"{name} does not match its checksum in {SIDECAR}")
    return sidecar


def _save(state: dict[str, torch.Tensor], path: Path, fmt: str, about: dict[str, Any]) -> None:
    if fmt == "safetensors":
        from safetensors.torch import save_file

        tied = about.get("tied", {})
        kept = {name: tensor for name, tensor in state.items() if name not in tied}
        save_file(kept, str(path), metadata=safetensors_metadata(about))
        _sort_metadata(path)
    else:
        torch.save(state, path)


def _sort_metadata(path: Path) -> None:
    """Put the header's metadata in key order. safetensors writes it in the order of a Rust
    HashMap, which differs from process to process: two members exporting the same state wrote
    different bytes. The header is 8 bytes of length, then JSON padded with spaces to a
    multiple of 8; tensor offsets count from its end, so its length may change."""
    sorted_path = path.with_name(path.name + ".sorted")
    with path.open("rb") as src, sorted_path.open("wb") as dst:
        size = int.from_bytes(src.read(8), "little")
        header = json.loads(src.read(size))
        if "__metadata__" in header:
            header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)
        dst.write(len(text).to_bytes(8, "little") + text)
        shutil.copyfileobj(src, dst, 1 << 22)  # the tensors, as they are, in 4 MiB pieces
    os.replace(sorted_path, path)


def safetensors_metadata(about: dict[str, Any]) -> dict[str, str]:
    """The sidecar's facts as the file's own metadata (safetensors holds strings only):
    strings as they are, anything else as JSON, unknowns (None) left out."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in about.items()
        if value is not None
    }


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
