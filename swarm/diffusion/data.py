"""Image datasets for the diffusion experts: sklearn's 8×8 digits and Debian's Fashion-MNIST.

Pixels are scaled to [-1, 1], the usual range for a diffusion model whose noise has unit variance.
Fashion-MNIST is read from the files of Debian's `dataset-fashion-mnist` package (no download at
run time); a machine without it gets an error that names the package.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import blake3
import numpy as np
import torch
from torch import Tensor

from ..data.digits import load_digits_arrays
from ..errors import ConfigError
from .errors import DatasetMissing

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_CLASSES = (
    "T-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageDataset:
    """Images [N, C, H, W] in [-1, 1], their class labels [N] (for evaluation only), a digest."""

    name: str
    images: Tensor
    labels: Tensor
    num_classes: int
    digest: str

    @property
    def image_size(self) -> int:
        return self.images.shape[-1]

    @property
    def channels(self) -> int:
        return self.images.shape[1]


def _dataset(name: str, pixels: np.ndarray, labels: np.ndarray, num_classes: int) -> ImageDataset:
    digest = blake3.blake3(np.ascontiguousarray(pixels).tobytes() + labels.tobytes()).hexdigest()
    images = torch.from_numpy(pixels.astype(np.float32))[:, None] * 2.0 - 1.0
    return ImageDataset(
        name=name,
        images=images,
        labels=torch.from_numpy(labels.astype(np.int64)),
        num_classes=num_classes,
        digest=digest,
    )


def load_digits_images(*, limit: int | None = None) -> ImageDataset:
    """scikit-learn's bundled 8×8 digits (1797, pixel values 0..16), the first `limit`."""
    flat, labels = load_digits_arrays()
    pixels = flat.reshape(-1, 8, 8)[:limit] / 16.0
    return _dataset("digits", pixels, labels[:limit], 10)


def _read_idx(path: Path, header_ints: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = np.frombuffer(raw, dtype=">u4", count=header_ints)[1:]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 * header_ints).reshape(*dims)


def load_fashion_mnist(
    *, split: str = "train", limit: int | None = None, root: Path = FASHION_MNIST_DIR
) -> ImageDataset:
    """Fashion-MNIST's 28×28 images (`split` "train": 60 000, "test": 10 000), the first `limit`."""
    prefix = {"train": "train", "test": "t10k"}.get(split)
    if prefix is None:
        raise ConfigError(f"Fashion-MNIST split must be 'train' or 'test', not {split!r}")
    images_path = root / f"{prefix}-images-idx3-ubyte.gz"
    labels_path = root / f"{prefix}-labels-idx1-ubyte.gz"
    if not (images_path.is_file() and labels_path.is_file()):
        raise DatasetMissing(
            f"Fashion-MNIST is not installed ({images_path} is missing): install Debian's "
            f"{FASHION_MNIST_PACKAGE} package (apt-get install {FASHION_MNIST_PACKAGE})"
        )
    pixels = _read_idx(images_path, 4)[:limit].astype(np.float64) / 255.0
    labels = _read_idx(labels_path, 2)[:limit]
    return _dataset(f"fashion-mnist-{split}", pixels, labels, 10)


def load_image_dataset(name: str, *, limit: int | None = None) -> ImageDataset:
    """A dataset by the name a run uses: "digits" or "fashion-mnist" (its training split)."""
    if name == "digits":
        return load_digits_images(limit=limit)
    if name == "fashion-mnist":
        return load_fashion_mnist(limit=limit)
    raise ConfigError(f"unknown image dataset {name!r}; choose digits or fashion-mnist")
