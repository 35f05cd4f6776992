"""Datasets that need no download (stdlib sources, pydoc text, sklearn digits) or that members
supply by digest (text files, token files, image folders), their deterministic per-member
shards, and step-addressed batch sources."""

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
from .images import ImageFolderConfig, ImageFolderDataset
from .shards import assign_shards, seeded_int, shard_indices, split_eval
from .text import TextDataset, TextDatasetConfig
from .tokens import TokenDataset, TokenDatasetConfig
from .user_data import check_user_data, folder_digest


class Dataset(Protocol):
    digest: str

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> Batches: ...

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]: ...


DATASET_CONFIGS: dict[str, type[Any]] = {
    "text": TextDatasetConfig,
    "tokens": TokenDatasetConfig,  # a token file, memory-mapped (nanoGPT's .bin)
    "images": ImageFolderConfig,  # ROOT/<class>/<image>
    "digits": DigitsDatasetConfig,
    "external": ExternalDatasetConfig,  # a user's own loop feeds the model (peertrain.DiLoCo)
}
FOLDER_DATASETS = ("images",)  # user data that is a folder, not a file


def data_digest(dataset: str, data: str) -> str:
    """The digest by which a spec of `dataset` names the user's data at `data`."""
    from pathlib import Path

    path = Path(data).expanduser()
    folder = dataset in FOLDER_DATASETS
    if not (path.is_dir() if folder else path.is_file()):
        kind = "folder" if folder else "file"
        raise ConfigError(f"--data {data!r} does not exist or is not a {kind}")
    return folder_digest(path) if folder else file_digest(path)


def dataset_config(name: str, settings: Mapping[str, Any] | None = None) -> Any:
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
    return config_from_dict(
        DATASET_CONFIGS[name], settings or {}, what=f"dataset {name!r}", under="dataset_settings"
    )


__all__ = [
    "DATASET_CONFIGS",
    "Batch",
    "Batches",
    "ConcatBatches",
    "Dataset",
    "DigitsDataset",
    "DigitsDatasetConfig",
    "ImageFolderConfig",
    "ImageFolderDataset",
    "InterleavedBatches",
    "RowBatches",
    "TextDataset",
    "TextDatasetConfig",
    "TokenDataset",
    "TokenDatasetConfig",
    "WindowBatches",
    "assign_shards",
    "check_user_data",
    "data_digest",
    "folder_digest",
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
