"""Batch sources addressed by step number, so a restarted member resumes on exactly the same data.

`batch(step)` is a pure function of (seed, shard, step): no iterator state has to be checkpointed,
and two arms of a benchmark can be given provably the same tokens by composing sources
(`ConcatBatches` for data parallel, `InterleavedBatches` for one worker doing everyone's steps).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import torch

from .shards import seeded_int

Batch = tuple[torch.Tensor, torch.Tensor]


class Batches(Protocol):
    """A source of training batches; `batch(step)` is deterministic."""

    batch_size: int

    def batch(self, step: int) -> Batch: ...


class WindowBatches:
    """Random windows of `block_size + 1` tokens inside fixed-length chunks, never across them.

    `chunks` is a tensor, or a numpy array that may be a memory map (token files): then only the
    windows drawn are read, and `rows` (the shard's chunk indices) keeps the shard unread too."""

    def __init__(
        self,
        chunks: torch.Tensor | np.ndarray,
        *,
        block_size: int,
        batch_size: int,
        seed: int,
        rows: torch.Tensor | None = None,
    ) -> None:
        if chunks.ndim != 2 or chunks.shape[1] < block_size + 1:
            raise ValueError(
                f"chunks of shape {tuple(chunks.shape)} cannot hold {block_size + 1} tokens"
            )
        self.chunks = chunks
        self.rows = rows
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self._offsets = torch.arange(block_size + 1)

    def batch(self, step: int) -> Batch:
        generator = torch.Generator().manual_seed(seeded_int("windows", self.seed, step))
        count = len(self.chunks) if self.rows is None else len(self.rows)
        rows = torch.randint(count, (self.batch_size,), generator=generator)
        if self.rows is not None:
            rows = self.rows[rows]
        last_start = self.chunks.shape[1] - self.block_size - 1
        starts = torch.randint(last_start + 1, (self.batch_size,), generator=generator)
        columns = starts[:, None] + self._offsets
        if isinstance(self.chunks, np.ndarray):
            picked = self.chunks[rows.numpy()[:, None], columns.numpy()]
            windows = torch.from_numpy(picked.astype(np.int64))
        else:
            windows = self.chunks[rows[:, None], columns].long()
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def tile_windows(chunks: torch.Tensor, block_size: int, batch_size: int) -> list[Batch]:
    """Non-overlapping (x, y) windows tiling every chunk, in a fixed order (eval batches)."""
    block, per_chunk = block_size, (chunks.size(1) - 1) // block_size
    x = torch.cat([chunks[:, i * block : (i + 1) * block] for i in range(per_chunk)])
    y = torch.cat([chunks[:, i * block + 1 : (i + 1) * block + 1] for i in range(per_chunk)])
    return list(zip(x.split(batch_size), y.split(batch_size), strict=True))


class RowBatches:
    """Random rows of a feature matrix with their labels (sampled with replacement per batch);
    `scale`: uint8 rows (images) become floats x·scale per batch, so the set stays 1 byte/value."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, *, batch_size: int, seed: int, scale: float = 1.0
    ) -> None:
        self.x, self.y = x, y
        self.batch_size = batch_size
        self.seed = seed
        self.scale = scale

    def batch(self, step: int) -> Batch:
        generator = torch.Generator().manual_seed(seeded_int("rows", self.seed, step))
        rows = torch.randint(len(self.x), (self.batch_size,), generator=generator)
        x = self.x[rows]
        return (x.float() * self.scale if self.scale != 1.0 else x), self.y[rows]


class ConcatBatches:
    """Step t is every part's step t, concatenated: what synchronous data parallel sees per step."""

    def __init__(self, parts: Sequence[Batches]) -> None:
        self.parts = list(parts)
        self.batch_size = sum(part.batch_size for part in self.parts)

    def batch(self, step: int) -> Batch:
        xs, ys = zip(*(part.batch(step) for part in self.parts), strict=True)
        return torch.cat(xs), torch.cat(ys)


class InterleavedBatches:
    """Step t is part (t mod n)'s step t // n: one worker walking through n workers' batches."""

    def __init__(self, parts: Sequence[Batches]) -> None:
        self.parts = list(parts)
        self.batch_size = self.parts[0].batch_size

    def batch(self, step: int) -> Batch:
        return self.parts[step % len(self.parts)].batch(step // len(self.parts))


def iterate(batches: Batches, start: int = 0) -> Iterator[Batch]:
    step = start
    while True:
        yield batches.batch(step)
        step += 1
