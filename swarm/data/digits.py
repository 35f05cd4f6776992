"""scikit-learn's bundled 8x8 digits (1797 images, inside the wheel): a dataset for fast tests.

Pixels are scaled to [0, 1]. The eval split is fixed by `split_seed`; the rest is dealt into shards
by the run seed, like every other dataset. The table is read from scikit-learn's own CSV file:
importing sklearn took 4 s of every digits member's start (most of it), reading the file 0.1 s.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..models.config import ConfigError
from .batches import Batch, RowBatches
from .shards import seeded_int, shard_indices, split_eval


@dataclass(frozen=True, slots=True, kw_only=True)
class DigitsDatasetConfig:
    eval_items: int = 360  # images held out for evaluation
    split_seed: int = 0  # seed of the train/eval split

    def build(self, data: object = None) -> DigitsDataset:
        if data is not None:
            raise ConfigError("a digits run trains on no user data: leave out --data")
        return DigitsDataset(self)


class DigitsDataset:
    num_classes = 10
    num_features = 64

    def __init__(self, config: DigitsDatasetConfig) -> None:
        pixels, labels = load_digits_arrays()
        self.config = config
        self.x = torch.from_numpy(pixels.astype(np.float32) / 16.0)
        self.y = torch.from_numpy(labels)
        self.eval_index, self.train_index = split_eval(
            len(self.x), config.eval_items, config.split_seed
        )
        self.digest = "sklearn-digits"

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> RowBatches:
        rows = shard_indices(self.train_index, shard, num_shards, seed)
        return RowBatches(
            self.x[rows],
            self.y[rows],
            batch_size=batch_size,
            seed=seeded_int("digits", seed, shard),
        )

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]:
        x, y = self.x[self.eval_index], self.y[self.eval_index]
        return list(zip(x.split(batch_size), y.split(batch_size), strict=True))[:max_batches]


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(pixels 1797×64 in 0..16 as float64, labels as int64), exactly `load_digits()`'s, from
    the CSV sklearn reads them from; through sklearn itself if the file has moved."""
    spec = importlib.util.find_spec("sklearn")
    if spec is not None and spec.origin is not None:
        path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            table = np.loadtxt(path, delimiter=",")
            return table[:, :-1], table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)
