"""Building component configs from plain mappings (a run manifest) with errors a user can act on.

Run manifests carry model, dataset and optimizer settings as plain msgpack/JSON mappings. A typo in
one of them must fail loudly at run creation, naming the valid keys, instead of silently training a
different model. Every config in the swarm layer is a frozen kw-only dataclass, so one helper covers
them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from ..errors import ConfigError  # defined in swarm/errors.py; imported from here too

C = TypeVar("C")


def config_from_dict(cls: type[C], values: Mapping[str, Any]) -> C:
    """Build the dataclass `cls` from `values`; unknown keys raise `ConfigError` listing valid ones.

    Lists are turned into tuples for tuple-typed fields, since JSON and msgpack have no tuples and
    the configs are frozen (hashable) dataclasses.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{cls.__name__} has no setting {', '.join(unknown)}; "
            f"valid settings are: {', '.join(sorted(fields))}"
        )
    converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**converted)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from exc


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of `config_from_dict`: a plain mapping suitable for a manifest."""
    return {
        f.name: list(v) if isinstance(v := getattr(config, f.name), tuple) else v
        for f in dataclasses.fields(config)
    }
