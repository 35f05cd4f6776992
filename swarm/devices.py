"""Where training runs and in what precision: `--device auto|cpu|cuda[:N]|mps`, `--precision`.

A device is the member's local choice, never the run's: the manifest says what to train, each
volunteer says on what. `auto` takes a GPU when torch sees one (CUDA, then Apple's MPS), else
the CPU. A device that is named but absent fails at once with what torch sees instead, rather
than at the first step with a driver trace.

Precision is autocast around forward and loss (bf16 where the device has it, fp16 on CUDA):
parameters, optimizer state, pseudo-gradients and the outer step stay fp32, so the int8 codec
and the state checksums see the same numbers on every device.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import torch

from .models.config import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device `name` stands for, or ConfigError saying what is available."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise ConfigError(f"--device mps: this machine has no MPS device ({_available()})")
        return torch.device("mps")
    match = _CUDA.match(name)
    if match is None:
        raise ConfigError(f"--device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    if not torch.cuda.is_available():
        built = "with" if torch.version.cuda else "without"
        raise ConfigError(
            f"--device {name}: torch sees no CUDA device here ({_available()}); "
            f"torch {torch.__version__} was built {built} CUDA"
        )
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise ConfigError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype for `precision` on `device` (None: plain fp32)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    if precision == "fp16" and device.type == "cpu":
        raise ConfigError("fp16 autocast is for GPUs; use bf16 on the CPU")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"{device} has no bf16: use fp16")
    return torch.bfloat16 if precision == "bf16" else torch.float16


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """Mixed precision for the forward pass and loss; a no-op for fp32."""
    dtype = autocast_dtype(device, precision)
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a batch tensor; from pinned host memory to a GPU without blocking the CPU."""
    if device.type == "cpu":
        return tensor
    if device.type == "cuda" and not tensor.is_pinned():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=device.type == "cuda")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def _available() -> str:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        found.append("mps")
    return "available: " + ", ".join(found)
