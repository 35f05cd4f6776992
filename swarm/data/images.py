"""Image folders: `ROOT/<class>/<image>` (torchvision's ImageFolder layout), classes in name order.

Images are decoded once with Pillow (the `images` extra), converted to `channels` (1: grey, 3:
RGB), resized to `image_size`² and kept as uint8 (a quarter of float32's memory); batches are
floats in [0, 1] of shape (batch, channels, size, size) with integer class labels. The folder is
the member's own (`--data DIR`), named in the spec by its digest (user_data.folder_digest).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..models.config import ConfigError
from .batches import Batch, RowBatches
from .shards import seeded_int, shard_indices, split_eval
from .user_data import check_user_data, image_files, is_digest


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageFolderConfig:
    data_digest: str = ""  # the image folder, by content digest (run create --data DIR fills it in)
    image_size: int = 32  # images are resized to this many pixels square
    channels: int = 3  # 1 (grey) or 3 (RGB)
    eval_items: int = 64  # images held out for evaluation
    max_images: int = 100_000  # images read at most
    split_seed: int = 0  # seed of the train/eval split

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise ConfigError(f"channels must be 1 (grey) or 3 (RGB), not {self.channels}")
        if not 1 <= self.image_size <= 1024 or self.max_images < 1:
            raise ConfigError("image_size must be 1..1024 and max_images positive")
        if not is_digest(self.data_digest):
            raise ConfigError(
                "an images dataset trains on a folder named by its digest: create the run "
                "with --dataset images --data DIR"
            )

    @property
    def max_bytes(self) -> int:
        """The most memory the decoded images take (the budget check reads it)."""
        return self.max_images * self.channels * self.image_size**2

    def check_data(self, data: Path | str | None) -> str:
        return check_user_data(self.data_digest, data, folder=True)

    def build(self, data: Path | str | None = None) -> ImageFolderDataset:
        return ImageFolderDataset(self, Path(self.check_data(data)))


class ImageFolderDataset:
    def __init__(self, config: ImageFolderConfig, root: Path) -> None:
        found = image_files(root)
        if len(found) > config.max_images:
            raise ConfigError(f"{root} holds {len(found)} images, over max_images")
        if len(found) <= config.eval_items:
            raise ConfigError(f"{len(found)} images are too few for {config.eval_items} eval items")
        self.classes = sorted({label for label, _ in found})
        self.num_classes = len(self.classes)
        self.config = config
        self.digest = config.data_digest
        self.x = torch.from_numpy(np.stack([_decode(path, config) for _, path in found]))
        self.y = torch.tensor([self.classes.index(label) for label, _ in found])
        self.eval_index, self.train_index = split_eval(
            len(found), config.eval_items, config.split_seed
        )

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> RowBatches:
        rows = shard_indices(self.train_index, shard, num_shards, seed)
        seed = seeded_int("images", seed, shard)
        return RowBatches(
            self.x[rows], self.y[rows], batch_size=batch_size, seed=seed, scale=1 / 255
        )

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]:
        x, y = self.x[self.eval_index].float() / 255, self.y[self.eval_index]
        return list(zip(x.split(batch_size), y.split(batch_size), strict=True))[:max_batches]


def _decode(path: Path, config: ImageFolderConfig) -> np.ndarray:
    """One image as uint8 (channels, size, size)."""
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("image folders need Pillow: pip install 'peertrain[images]'") from None
    size = (config.image_size, config.image_size)
    try:
        with Image.open(path) as image:
            image = image.convert("L" if config.channels == 1 else "RGB")
            pixels = np.asarray(image.resize(size, Image.Resampling.BILINEAR), dtype=np.uint8)
    except OSError as exc:  # Pillow's error for a file it cannot decode
        raise ConfigError(f"{path}: not an image Pillow can read ({exc})") from None
    return pixels[None] if config.channels == 1 else pixels.transpose(2, 0, 1).copy()
