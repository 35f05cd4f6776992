"""scikit-learn's bundled 8x8 digits (1797 images, inside the wheel): a dataset for fast tests.

Pixels are scaled to [0, 1]. The eval split is fixed by `split_seed`; the rest is dealt into shards
by the run seed, like every other dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..models.config import ConfigError
from .batches import Batch, RowBatches
from .shards import seeded_int, shard_indices, split_eval


@dataclass(frozen=True, slots=True, kw_only=True)
class DigitsDatasetConfig:
    eval_items: int = 360
    split_seed: int = 0

    def build(self, data: object = None) -> DigitsDataset:
        if data is not None:
            raise ConfigError("a digits run trains on no user data: leave out --data")
        return DigitsDataset(self)


class DigitsDataset:
    num_classes = 10
    num_features = 64

    def __init__(self, config: DigitsDatasetConfig) -> None:
        from sklearn.datasets import load_digits  # imported lazily: only digit runs need sklearn

        bunch = load_digits()
        self.config = config
        self.x = torch.from_numpy(np.asarray(bunch.data, dtype=np.float32) / 16.0)
        self.y = torch.from_numpy(np.asarray(bunch.target, dtype=np.int64))
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
