"""Which model a run names: built-ins, installed plugins, and a user's own factory by import path.

    gpt, mlp                       built into peertrain
    <name>                         an entry point in group `peertrain.models` of an installed
                                   package: a factory `f(**settings) -> nn.Module`
    my_pkg.models:build            a factory by import path, when this process's user trusts it

Trust: a run's spec travels from peer to peer, and importing a module runs its code. A remote
manifest must never make a joiner run code it did not choose (docs/design.md §5), so an import path
is resolved only after `trust_import(path)` — which the CLI calls when the local user passes the
same `--model PATH` to `run create` or `join` — or when it is in PEERTRAIN_TRUSTED_MODELS.
Installed entry points are trusted: installing a package was the user's choice.

The model contract is the built-ins': `forward(x, y) -> (logits, loss)`. A factory's module is
checked for it on build, with an error that says what to return.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from .config import ConfigError

ENTRY_POINT_GROUP = "peertrain.models"
TRUSTED_ENV = "PEERTRAIN_TRUSTED_MODELS"  # comma-separated import paths
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

_trusted: set[str] = set()


def trust_import(path: str) -> None:
    """Let this process import `path` when a run names it (the local user chose it)."""
    if not IMPORT_PATH.match(path):
        raise ConfigError(f"{path!r} is not an import path of the form package.module:factory")
    _trusted.add(path)


def is_import_path(name: str) -> bool:
    return bool(IMPORT_PATH.match(name))


def trusted_imports() -> frozenset[str]:
    from_env = {p.strip() for p in os.environ.get(TRUSTED_ENV, "").split(",") if p.strip()}
    return frozenset(_trusted | from_env)


@dataclass(frozen=True, slots=True, kw_only=True)
class FactoryModelConfig:
    """A model built by a factory function: `settings` are its keyword arguments."""

    source: str  # the entry point name or import path, for messages
    factory: Callable[..., Any] = field(compare=False, repr=False)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def build(self, *, seed: int = 0):
        import torch

        torch.manual_seed(seed)  # every member builds the same initial weights from the spec
        try:
            model = self.factory(**dict(self.settings))
        except TypeError as exc:
            raise ConfigError(f"model {self.source}: {exc}") from exc
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(
                f"model {self.source} returned {type(model).__name__}; a factory must return a "
                "torch.nn.Module whose forward(x, y) returns (logits, loss)"
            )
        return model


def plugin_factory(name: str) -> Callable[..., Any] | None:
    """The factory an installed package registered as `name`, if any."""
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            return point.load()
    return None


def imported_factory(path: str) -> Callable[..., Any]:
    if path not in trusted_imports():
        raise ConfigError(
            f"this run's model is the import path {path!r}; peertrain imports code only when "
            f"you choose it: pass --model {path} yourself (or list it in {TRUSTED_ENV})"
        )
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"model {path}: cannot import {module_name} ({exc})") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"model {path}: {module_name} has no callable {attr!r}")
    return factory


def factory_config(name: str, settings: Mapping[str, Any]) -> FactoryModelConfig | None:
    """A config for a plugin or import-path model, or None when `name` is neither."""
    if is_import_path(name):
        return FactoryModelConfig(source=name, factory=imported_factory(name), settings=settings)
    factory = plugin_factory(name)
    if factory is None:
        return None
    return FactoryModelConfig(source=name, factory=factory, settings=settings)
