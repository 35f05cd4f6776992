"""A model the user holds in their own process: a run names it by fingerprint, never builds it.

`peertrain.DiLoCo(model, …)` wraps a model that exists only in the user's script, so its run's
spec cannot say how to build it. It says `external:<fingerprint>` instead: a hash of the
parameter names, shapes and dtypes in `named_parameters` order (the flat layout every member's
pseudo-gradient is written in), so a member with another architecture is refused before it
exchanges anything, and `model_settings.params` (for a joiner's `--max-params` check). A daemon
asked to build such a model on its own refuses: only a process holding the model can join.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import ConfigError

EXTERNAL_PREFIX = "external:"


def model_fingerprint(model: Any) -> str:
    """Hex digest of the layout of `model`'s parameters (names, shapes, dtypes, in order)."""
    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(f"{name}:{tuple(param.shape)}:{param.dtype}\n".encode())
    return digest.hexdigest()[:32]


def external_model_name(model: Any) -> str:
    return EXTERNAL_PREFIX + model_fingerprint(model)


def is_external(name: str) -> bool:
    return name.startswith(EXTERNAL_PREFIX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalModelConfig:
    """What a run says of a user-supplied model: its fingerprint and parameter count."""

    fingerprint: str
    params: int

    @classmethod
    def of(cls, name: str, settings: Mapping[str, Any]) -> ExternalModelConfig:
        fingerprint = name.removeprefix(EXTERNAL_PREFIX)
        params = settings.get("params")
        if not fingerprint or set(settings) != {"params"} or not isinstance(params, int):
            raise ConfigError(
                "a user-supplied model is named external:<fingerprint> with model_settings "
                "{'params': <parameter count>} and nothing else"
            )
        if params < 1:
            raise ConfigError("a user-supplied model has at least one parameter")
        return cls(fingerprint=fingerprint, params=params)

    def check(self, model: Any) -> None:
        """Refuse `model` unless it has this run's architecture."""
        theirs = model_fingerprint(model)
        if theirs != self.fingerprint:
            raise ConfigError(
                f"this run trains a model with layout {self.fingerprint}; yours is {theirs} "
                "(parameter names, shapes or dtypes differ): every member must bring the same "
                "architecture"
            )

    def build(self, *, seed: int = 0):
        raise ConfigError(
            f"this run trains a user-supplied model (external:{self.fingerprint}) that no daemon "
            "can build: join it from the script that holds the model, with "
            "peertrain.DiLoCo(model, optimizer, run=...)"
        )
