"""A diffusion run's partition artifact: fitted once by the creator, named in the spec by address.

The address is the tensor-service root checksum of the artifact's bytes (as a uint8 tensor named
`diffusion/partition`), so the same hash both verifies a locally fitted artifact and fetches one
from any member that serves it. A member first fits it itself (deterministic float64 numpy: the
same bytes on the same software) and falls back to fetching only when its bytes differ.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
from peertrain.protocol.int8_blockwise import DEFAULT_BLOCK_SIZE
from peertrain.protocol.tensors import PreparedTensor, prepare_encoded

from .data import ImageDataset, load_image_dataset
from .errors import PartitionCorrupt
from .partition import Partition, fit_partition
from .run_spec import DiffusionSpec

TENSOR_NAME = "diffusion/partition"
MAX_PARTITION_BYTES = 64 << 20


@functools.lru_cache(maxsize=2)
def run_images(dataset: str, limit: int | None) -> ImageDataset:
    """The run's training images (cached: members of a local swarm share a process rarely, but a
    sampler and a member in one daemon do)."""
    return load_image_dataset(dataset, limit=limit)


def images_of(spec: DiffusionSpec) -> ImageDataset:
    return run_images(spec.dataset, spec.limit())


def fit_run_partition(spec: DiffusionSpec) -> bytes:
    """The artifact of `spec`'s partition, fitted on its images."""
    data = images_of(spec)
    partition = fit_partition(
        data.images.numpy(), spec.partition_config(), dataset_digest=data.digest
    )
    return partition.to_bytes()


def partition_tensor(artifact: bytes) -> PreparedTensor:
    """The artifact as the tensor service carries it: its bytes as float32 words (an artifact is
    a whole number of 8-byte words: partition.py), hashed, never converted."""
    if len(artifact) % 4:
        raise PartitionCorrupt("a partition artifact is a whole number of 4-byte words")
    raw = torch.frombuffer(bytearray(artifact), dtype=torch.uint8)
    return prepare_encoded(
        TENSOR_NAME,
        raw,
        dtype="float32",
        shape=(len(artifact) // 4,),
        codec="fp32",
        block_size=DEFAULT_BLOCK_SIZE,
    )


def partition_address(artifact: bytes) -> str:
    return partition_tensor(artifact).header.checksum.hex()


def with_partition(settings: dict[str, Any]) -> tuple[DiffusionSpec, bytes]:
    """The creator's spec with its partition fitted and named (`settings`: DiffusionSpec fields)."""
    spec = DiffusionSpec.checked(settings)
    artifact = fit_run_partition(spec)
    sizes = tuple(int(n) for n in Partition.from_bytes(artifact).sizes())
    named = dataclasses.replace(spec, partition=partition_address(artifact), cluster_sizes=sizes)
    return named, artifact


def open_partition(spec: DiffusionSpec, artifact: bytes) -> Partition:
    """The run's partition from `artifact`, refused unless it is the one the spec names and fits
    this node's copy of the images."""
    if partition_address(artifact) != spec.partition:
        raise PartitionCorrupt(f"partition bytes do not hash to the run's {spec.partition[:16]}")
    partition = Partition.from_bytes(artifact)
    data = images_of(spec)
    if partition.dataset_digest != data.digest or len(partition.assignments) != len(data.images):
        raise PartitionCorrupt(
            f"the run's partition was fitted on other images ({partition.dataset_digest[:16]}) "
            f"than this node's {spec.dataset} ({data.digest[:16]})"
        )
    if partition.config.clusters != spec.experts or (
        spec.cluster_sizes and tuple(partition.sizes().tolist()) != spec.cluster_sizes
    ):
        raise PartitionCorrupt("the partition's clusters are not the ones the run names")
    return partition
