"""Which member trains on which part of the data, decided by the manifest alone.

No coordinator hands out shards: every member computes the same assignment from the manifest seed
and the membership it sees in RunState. Items (text chunks, digit rows) are first split once into
eval and train by the dataset's own `split_seed` (so eval sets are comparable across runs), then
the train items are permuted by the run's seed and dealt round-robin into `num_shards` disjoint
shards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch

from ..models.config import ConfigError


def seeded_int(*parts: object) -> int:
    """A 63-bit integer derived from `parts`, stable across processes, machines and Python runs."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def permutation(n: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seeded_int("perm", seed)))


def split_eval(n_items: int, eval_items: int, split_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(eval indices, train indices): a fixed random `eval_items` of `n_items` are held out."""
    if not 0 < eval_items < n_items:
        raise ConfigError(f"cannot hold out {eval_items} of {n_items} items for evaluation")
    order = permutation(n_items, split_seed)
    return order[:eval_items].sort().values, order[eval_items:]


def shard_indices(train: torch.Tensor, shard: int, num_shards: int, seed: int) -> torch.Tensor:
    """The items of shard `shard` out of `num_shards`: disjoint, together covering `train`."""
    if not 0 <= shard < num_shards:
        raise ConfigError(f"shard {shard} is outside 0..{num_shards - 1}")
    if num_shards > len(train):
        raise ConfigError(f"{len(train)} training items cannot fill {num_shards} shards")
    dealt = train[permutation(len(train), seed)]
    return dealt[shard::num_shards].sort().values


def assign_shards(seed: int, members: Iterable[str], num_shards: int) -> dict[str, int]:
    """Shard per member ID: members ranked by a seeded hash of their ID, rank i gets shard i mod n.

    Disjoint while there are at most `num_shards` members. Every member computes the same mapping
    from the same membership; a join or leave may move other members to another shard, which is
    harmless for DiLoCo (each round only needs members to draw different data).
    """
    ranked = sorted(set(members), key=lambda member: (seeded_int("shard", seed, member), member))
    return {member: rank % num_shards for rank, member in enumerate(ranked)}
