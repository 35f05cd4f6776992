"""Datasets that need no download (stdlib sources, pydoc text, user files, sklearn digits), their
deterministic per-member shards, and step-addressed batch sources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..models.config import ConfigError, config_from_dict
from .batches import (
    Batch,
    Batches,
    ConcatBatches,
    InterleavedBatches,
    RowBatches,
    WindowBatches,
    iterate,
)
from .corpus import corpus_digest, file_digest, load_corpus, pydoc_topics_text, stdlib_source_files
from .digits import DigitsDataset, DigitsDatasetConfig
from .external import ExternalDatasetConfig
from .shards import assign_shards, seeded_int, shard_indices, split_eval
from .text import TextDataset, TextDatasetConfig


class Dataset(Protocol):
    digest: str

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> Batches: ...

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]: ...


DATASET_CONFIGS: dict[
    str, type[TextDatasetConfig] | type[DigitsDatasetConfig] | type[ExternalDatasetConfig]
] = {
    "text": TextDatasetConfig,
    "digits": DigitsDatasetConfig,
    "external": ExternalDatasetConfig,  # a user's own loop feeds the model (peertrain.DiLoCo)
}


def dataset_config(
    name: str, settings: Mapping[str, Any] | None = None
) -> TextDatasetConfig | DigitsDatasetConfig | ExternalDatasetConfig:
    """The config of dataset `name` (one of `DATASET_CONFIGS`) with `settings` applied.

    A run's settings come from a manifest that any peer may have written: they never name a
    local file (`files` was once read from the joiner's disk, `~` expanded), only a digest."""
    if settings and "files" in settings:
        raise ConfigError(
            "a run spec may not name local files (dataset_settings.files): user data is named "
            "by its digest (data_digest) and each member supplies it with --data PATH"
        )
    if name not in DATASET_CONFIGS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of {', '.join(DATASET_CONFIGS)}")
    return config_from_dict(DATASET_CONFIGS[name], settings or {})


__all__ = [
    "DATASET_CONFIGS",
    "Batch",
    "Batches",
    "ConcatBatches",
    "Dataset",
    "DigitsDataset",
    "DigitsDatasetConfig",
    "InterleavedBatches",
    "RowBatches",
    "TextDataset",
    "TextDatasetConfig",
    "WindowBatches",
    "assign_shards",
    "corpus_digest",
    "dataset_config",
    "file_digest",
    "iterate",
    "load_corpus",
    "pydoc_topics_text",
    "seeded_int",
    "shard_indices",
    "split_eval",
    "stdlib_source_files",
]
