"""Image datasets, the classifier-FID quality meter, and PNG grids."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import scipy.linalg
import torch
from peertrain.swarm.diffusion import (
    DatasetMissing,
    QualityMeter,
    TrainConfig,
    frechet_distance,
    image_grid,
    load_digits_images,
    load_fashion_mnist,
    png_bytes,
    train_classifier,
)
from peertrain.swarm.diffusion.data import FASHION_MNIST_DIR, FASHION_MNIST_PACKAGE


def test_digits_are_8x8_images_scaled_to_plus_minus_one():
    digits = load_digits_images()

    assert digits.images.shape == (1797, 1, 8, 8) and digits.labels.shape == (1797,)
    assert digits.images.min() == -1.0 and digits.images.max() == 1.0
    assert digits.num_classes == 10 and len(digits.digest) == 64


def test_a_missing_fashion_mnist_names_the_debian_package(tmp_path):
    with pytest.raises(DatasetMissing, match=FASHION_MNIST_PACKAGE):
        load_fashion_mnist(root=tmp_path)


@pytest.mark.skipif(not FASHION_MNIST_DIR.is_dir(), reason=f"{FASHION_MNIST_PACKAGE} not installed")
def test_fashion_mnist_is_read_from_the_debian_package():
    test = load_fashion_mnist(split="test", limit=500)

    assert test.images.shape == (500, 1, 28, 28)
    assert -1.0 <= test.images.min() < test.images.max() <= 1.0
    assert set(test.labels.tolist()) == set(range(10))


def test_frechet_distance_matches_the_closed_form_with_a_matrix_square_root():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((500, 6))
    b = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 6)) + 0.5
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(cov_a @ cov_b).real
    expected = ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(cov_a + cov_b - 2 * root)

    assert frechet_distance(a, b) == pytest.approx(expected, rel=1e-6)
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)


@pytest.fixture(scope="module")
def digits_meter():
    torch.set_num_threads(1)
    digits = load_digits_images()
    classifier = train_classifier(
        digits.images, digits.labels, 10, TrainConfig(steps=200, batch_size=64, lr=3e-3)
    )
    return digits, QualityMeter(classifier, digits.images, 10)


def test_real_images_score_far_better_than_noise_and_cover_every_class(digits_meter):
    digits, meter = digits_meter
    noise = torch.rand(800, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1

    real = meter.measure(digits.images[:800])
    fake = meter.measure(noise)

    assert real.fid < fake.fid / 10
    assert real.classes_covered == 10 and real.class_tv < 0.1
    assert sum(real.class_shares) == pytest.approx(1.0)


def test_samples_of_one_class_are_caught_by_coverage(digits_meter):
    digits, meter = digits_meter
    only_zeros = digits.images[digits.labels == 0]

    report = meter.measure(only_zeros)

    assert report.classes_covered <= 2 and report.class_tv > 0.8


def test_the_bootstrap_interval_holds_the_fid_and_narrows_with_more_samples(digits_meter):
    digits, meter = digits_meter

    few = meter.measure(digits.images[:200], bootstrap=40)
    many = meter.measure(digits.images[:1600], bootstrap=40)

    for report in (few, many):
        low, high = report.fid_interval
        assert low < report.fid < high
    assert many.fid_interval[1] - many.fid_interval[0] < few.fid_interval[1] - few.fid_interval[0]
    assert meter.measure(digits.images[:200]).fid_interval is None


def _decode_png(data: bytes) -> tuple[int, int, int, np.ndarray]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, {}
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, payload = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + payload)
        chunks[kind] = payload
        offset += 12 + length
    width, height, _, colour, *_ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    channels = 1 if colour == 0 else 3
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, -1)
    assert (rows[:, 0] == 0).all()  # filter byte
    return width, height, colour, rows[:, 1:].reshape(height, width, channels)


def test_a_grid_of_samples_is_a_valid_png_with_the_same_pixels():
    images = torch.linspace(-1, 1, 10 * 64).reshape(10, 1, 8, 8)

    grid = image_grid(images, columns=4, padding=1, scale=2)
    width, height, colour, pixels = _decode_png(png_bytes(grid))

    assert (height, width) == (3 * 17 + 1, 4 * 17 + 1) == grid.shape
    assert colour == 0 and np.array_equal(pixels[:, :, 0], grid)
    assert grid[1, 1] == 0 and grid[-2, -2] == 0  # first pixel black; the empty last tile too
    assert grid[1 + 2 * 17 + 15, 1 + 17 + 15] == 255  # image 9's last pixel, the brightest
