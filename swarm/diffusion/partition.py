"""The data partition: which expert trains on which example, as one content-addressed artifact.

Features come from a fixed extractor (PCA of the pixels), clustered by k-means into many fine
clusters, whose centroids are then consolidated into K coarse clusters by a k-means weighted by
fine-cluster size (as in Decentralized Diffusion Models): fine clusters follow the data's shape,
and the merge keeps coarse clusters from splitting a dense mode. Everything is float64 numpy with
seeded k-means++ and first-index tie breaking, so one machine gets the same bytes every time.

Members do not recompute it: the run's creator builds it once, names it by the blake3 digest of
its bytes in the manifest, and every member fetches those bytes and checks the digest, so all
members agree on the cluster of every example even where floating point differs across machines.
New images (noised samples, a user's data) are assigned with the stored extractor and centroids.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass

import blake3
import numpy as np

from ..errors import ConfigError
from .errors import PartitionCorrupt, PartitionError

MAGIC = b"peertrain-partition-v1\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionConfig:
    """K coarse clusters merged from `fine_clusters`, on `features` PCA components."""

    clusters: int = 4
    fine_clusters: int = 64
    features: int = 16
    iterations: int = 30
    restarts: int = 4  # k-means runs from different seeds; the lowest inertia wins
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.clusters <= self.fine_clusters:
            raise ConfigError("need 1 <= clusters <= fine_clusters")
        if min(self.features, self.iterations, self.restarts) < 1:
            raise ConfigError("features, iterations and restarts must be positive")


def _squared_distances(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    return (
        np.sum(x * x, axis=1)[:, None]
        - 2.0 * x @ centroids.T
        + np.sum(centroids * centroids, axis=1)[None, :]
    )


def _kmeans_plus_plus(x: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator):
    chosen = [int(rng.choice(len(x), p=weights / weights.sum()))]
    closest = _squared_distances(x, x[chosen]).min(axis=1).clip(min=0.0)
    for _ in range(1, k):
        mass = closest * weights
        pick = int(rng.choice(len(x), p=mass / mass.sum())) if mass.sum() > 0 else len(chosen)
        chosen.append(pick)
        closest = np.minimum(closest, _squared_distances(x, x[[pick]])[:, 0].clip(min=0.0))
    return x[chosen].copy()


def _lloyd(
    x: np.ndarray, weights: np.ndarray, k: int, *, iterations: int, seed: int
) -> tuple[np.ndarray, float]:
    """Lloyd's k-means from a k-means++ start: (centroids, weighted inertia)."""
    centroids = _kmeans_plus_plus(x, weights, k, np.random.default_rng(seed))
    for _ in range(iterations):
        distances = _squared_distances(x, centroids)
        nearest = distances.argmin(axis=1)
        mass = np.bincount(nearest, weights=weights, minlength=k)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, x * weights[:, None])
        updated = centroids.copy()
        filled = mass > 0
        updated[filled] = sums[filled] / mass[filled, None]
        for empty in np.flatnonzero(~filled):  # restart an emptied cluster at the worst fit
            updated[empty] = x[int(distances.min(axis=1).argmax())]
        if np.array_equal(updated, centroids):
            break
        centroids = updated
    inertia = float((_squared_distances(x, centroids).min(axis=1).clip(min=0) * weights).sum())
    return centroids, inertia


def weighted_kmeans(
    x: np.ndarray,
    k: int,
    *,
    weights: np.ndarray | None = None,
    iterations: int,
    restarts: int,
    seed: int,
) -> np.ndarray:
    """The best (lowest weighted inertia, first on ties) of `restarts` seeded k-means runs."""
    weights = np.ones(len(x)) if weights is None else weights.astype(np.float64)
    runs = [
        _lloyd(x, weights, k, iterations=iterations, seed=seed * 1000 + r) for r in range(restarts)
    ]
    return min(runs, key=lambda run: run[1])[0]


@dataclass(frozen=True, eq=False, kw_only=True)
class Partition:
    """A fitted partition: the extractor (mean, components), the centroids, and every assignment."""

    config: PartitionConfig
    dataset_digest: str
    mean: np.ndarray  # [D] pixel mean
    components: np.ndarray  # [F, D] principal axes
    fine_centroids: np.ndarray  # [M, F]
    fine_to_coarse: np.ndarray  # [M] coarse cluster of each fine cluster
    assignments: np.ndarray  # [N] coarse cluster of each training example

    def features(self, pixels: np.ndarray) -> np.ndarray:
        flat = np.asarray(pixels, dtype=np.float64).reshape(len(pixels), -1)
        return (flat - self.mean) @ self.components.T

    def clusters_of(self, pixels: np.ndarray) -> np.ndarray:
        """The coarse cluster of each image (nearest fine centroid, then its coarse cluster)."""
        fine = _squared_distances(self.features(pixels), self.fine_centroids).argmin(axis=1)
        return self.fine_to_coarse[fine]

    def sizes(self) -> np.ndarray:
        return np.bincount(self.assignments, minlength=self.config.clusters)

    def to_bytes(self) -> bytes:
        return _encode(self)

    @property
    def digest(self) -> str:
        return blake3.blake3(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes, *, digest: str | None = None) -> Partition:
        """Parse an artifact; with `digest`, refuse bytes that do not hash to it."""
        if digest is not None and blake3.blake3(data).hexdigest() != digest:
            raise PartitionCorrupt(f"partition bytes do not hash to {digest}")
        return _decode(data)


def _principal_components(flat: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    mean = flat.mean(axis=0)
    centered = flat - mean
    eigenvalues, eigenvectors = np.linalg.eigh(centered.T @ centered)
    components = eigenvectors[:, ::-1][:, :count].T.copy()
    # An eigenvector's sign is arbitrary: fix it so the largest entry is positive.
    signs = np.sign(components[np.arange(count), np.abs(components).argmax(axis=1)])
    return mean, components * signs[:, None]


def fit_partition(pixels: np.ndarray, config: PartitionConfig, *, dataset_digest: str) -> Partition:
    """Cluster `pixels` [N, ...] into `config.clusters` coarse clusters, fine to coarse."""
    flat = np.asarray(pixels, dtype=np.float64).reshape(len(pixels), -1)
    if len(flat) < config.fine_clusters:
        raise PartitionError(f"{len(flat)} items cannot fill {config.fine_clusters} fine clusters")
    mean, components = _principal_components(flat, min(config.features, flat.shape[1]))
    features = (flat - mean) @ components.T
    fine = weighted_kmeans(
        features,
        config.fine_clusters,
        iterations=config.iterations,
        restarts=config.restarts,
        seed=config.seed,
    )
    fine_sizes = np.bincount(
        _squared_distances(features, fine).argmin(axis=1), minlength=config.fine_clusters
    )
    coarse = weighted_kmeans(
        fine,
        config.clusters,
        weights=np.maximum(fine_sizes, 1e-9),
        iterations=config.iterations,
        restarts=config.restarts,
        seed=config.seed + 1,
    )
    fine_to_coarse = _squared_distances(fine, coarse).argmin(axis=1)
    partial = Partition(
        config=config,
        dataset_digest=dataset_digest,
        mean=mean,
        components=components,
        fine_centroids=fine,
        fine_to_coarse=fine_to_coarse.astype(np.int64),
        assignments=np.zeros(0, np.int64),
    )
    assignments = partial.clusters_of(flat)
    if len(np.unique(assignments)) < config.clusters:
        raise PartitionError(f"consolidation left a cluster of {config.clusters} empty")
    return dataclasses.replace(partial, assignments=assignments.astype(np.int64))


def random_assignments(n: int, clusters: int, *, seed: int) -> np.ndarray:
    """A balanced random partition (the baseline feature clusters must beat)."""
    order = np.random.default_rng(seed).permutation(n)
    assignments = np.empty(n, dtype=np.int64)
    assignments[order] = np.arange(n) % clusters
    return assignments


_ARRAYS = ("mean", "components", "fine_centroids", "fine_to_coarse", "assignments")


def _encode(partition: Partition) -> bytes:
    arrays = {name: np.ascontiguousarray(getattr(partition, name)) for name in _ARRAYS}
    header = {
        "config": {f: getattr(partition.config, f) for f in PartitionConfig.__dataclass_fields__},
        "dataset_digest": partition.dataset_digest,
        "arrays": {n: [a.dtype.str.lstrip("<>=|")[0], list(a.shape)] for n, a in arrays.items()},
    }
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    # spaces after the JSON align the arrays to 8 bytes (and the artifact to whole float32
    # words, which is how the tensor service carries it: run_partition.py)
    head += b" " * (-(len(MAGIC) + 4 + len(head)) % 8)
    body = b"".join(
        a.astype("<f8" if a.dtype.kind == "f" else "<i8").tobytes() for a in arrays.values()
    )
    return MAGIC + struct.pack("<I", len(head)) + head + body


def _decode(data: bytes) -> Partition:
    try:
        if not data.startswith(MAGIC):
            raise ValueError("not a partition artifact")
        offset = len(MAGIC) + 4
        (head_len,) = struct.unpack_from("<I", data, len(MAGIC))
        header = json.loads(data[offset : offset + head_len])
        offset += head_len
        arrays = {}
        for name in _ARRAYS:
            kind, shape = header["arrays"][name]
            dtype = np.dtype("<f8" if kind == "f" else "<i8")
            count = int(np.prod(shape))
            arrays[name] = np.frombuffer(data, dtype, count, offset).reshape(shape).copy()
            offset += count * 8
        if offset != len(data):
            raise ValueError("trailing bytes")
        return Partition(
            config=PartitionConfig(**header["config"]),
            dataset_digest=header["dataset_digest"],
            **arrays,
        )
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise PartitionCorrupt(f"unreadable partition artifact: {exc}") from exc
