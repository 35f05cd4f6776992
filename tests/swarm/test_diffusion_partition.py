"""The data partition is a content-addressed artifact: every member derives the same clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest
from peertrain.swarm.diffusion import (
    Partition,
    PartitionConfig,
    PartitionCorrupt,
    PartitionError,
    fit_partition,
    load_digits_images,
    random_assignments,
)
from peertrain.swarm.errors import ConfigError


def ring_with_modes(points_per_mode: int = 200, modes: int = 8, *, seed: int = 0):
    rng = np.random.default_rng(seed)
    angles = np.arange(modes) * 2 * math.pi / modes
    centres = 4.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    points = centres[:, None, :] + 0.3 * rng.standard_normal((modes, points_per_mode, 2))
    return points.reshape(-1, 2), np.repeat(np.arange(modes), points_per_mode)


@pytest.fixture(scope="module")
def digits_partition() -> tuple[np.ndarray, Partition]:
    digits = load_digits_images()
    pixels = digits.images.numpy()
    config = PartitionConfig(clusters=4, fine_clusters=32, features=16)
    return pixels, fit_partition(pixels, config, dataset_digest=digits.digest)


def test_fitting_twice_gives_the_same_bytes_digest_and_assignment(digits_partition):
    pixels, first = digits_partition
    second = fit_partition(pixels, first.config, dataset_digest=first.dataset_digest)

    assert second.to_bytes() == first.to_bytes()
    assert second.digest == first.digest
    assert np.array_equal(second.assignments, first.assignments)


def test_a_member_loads_the_artifact_by_digest_and_derives_every_cluster(digits_partition):
    pixels, built = digits_partition

    fetched = Partition.from_bytes(built.to_bytes(), digest=built.digest)

    assert fetched.digest == built.digest
    assert np.array_equal(fetched.clusters_of(pixels), built.assignments)


def test_bytes_that_do_not_match_the_digest_are_refused(digits_partition):
    _, built = digits_partition
    data = bytearray(built.to_bytes())
    data[-1] ^= 1

    with pytest.raises(PartitionCorrupt):
        Partition.from_bytes(bytes(data), digest=built.digest)
    with pytest.raises(PartitionCorrupt):
        Partition.from_bytes(built.to_bytes()[:-8])  # truncated: unreadable even unchecked


def test_every_coarse_cluster_is_a_union_of_fine_clusters(digits_partition):
    pixels, built = digits_partition
    features = built.features(pixels)
    nearest_fine = ((features[:, None, :] - built.fine_centroids[None]) ** 2).sum(-1).argmin(1)

    assert np.array_equal(built.fine_to_coarse[nearest_fine], built.assignments)
    assert len(built.fine_centroids) == 32
    assert sorted(np.unique(built.fine_to_coarse)) == [0, 1, 2, 3]
    assert built.sizes().sum() == len(pixels) and built.sizes().min() > 0


def test_feature_clusters_recover_well_separated_modes():
    points, modes = ring_with_modes()

    partition = fit_partition(
        points, PartitionConfig(clusters=8, fine_clusters=32, features=2), dataset_digest="ring"
    )

    # each cluster holds exactly one mode, whatever the numbering
    purity = sum(np.bincount(modes[partition.assignments == k]).max() for k in range(8))
    assert purity == len(points)


def test_too_few_items_for_the_fine_clusters_is_an_error():
    with pytest.raises(PartitionError):
        fit_partition(np.zeros((10, 4)), PartitionConfig(fine_clusters=16), dataset_digest="x")
    with pytest.raises(ConfigError):
        PartitionConfig(clusters=8, fine_clusters=4)


def test_random_assignments_are_balanced_and_seeded():
    first = random_assignments(1001, 4, seed=3)

    assert np.bincount(first).tolist() == [251, 250, 250, 250]
    assert np.array_equal(first, random_assignments(1001, 4, seed=3))
    assert not np.array_equal(first, random_assignments(1001, 4, seed=4))
