"""The data of a user's own training loop: named in a run's spec, never loaded by peertrain.

A `peertrain.DiLoCo` run trains on whatever the user's script feeds its model, so its spec says
`dataset: external`; a daemon asked to load it refuses (only the script has the batches).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.config import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalDatasetConfig:
    def build(self, data: str | None = None):
        raise ConfigError(
            "this run trains on data from the user's own training loop: join it from that "
            "script with peertrain.DiLoCo(model, optimizer, run=...)"
        )
