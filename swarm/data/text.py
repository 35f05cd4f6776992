"""A byte-level text dataset: a corpus cut into fixed chunks, held-out eval chunks, member shards.

Chunks (default 1 KiB) are the unit of both the eval split and the shard deal; training windows
never cross a chunk boundary, so disjoint shards really share no training token.

A run's config travels in its manifest, so it never names a local file: the user's own text is
named by `data_digest` (the content digest of the file) and each member supplies the file
locally (`build(data=PATH)`, the CLI's `--data`); a file with another digest is refused before
anything trains on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..models.config import ConfigError
from .batches import Batch, WindowBatches, tile_windows
from .corpus import corpus_digest, load_corpus
from .shards import seeded_int, shard_indices, split_eval
from .user_data import check_user_data, is_digest


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDatasetConfig:
    """Where the text comes from and how it is cut. The user's file (digest `data_digest`, given
    to `build`) is read after the named `sources`."""

    # named corpora read first: stdlib (CPython's library sources), pydoc
    sources: tuple[str, ...] = ("stdlib",)
    data_digest: str = ""  # the user's own text, by content digest (file_digest); "" = none
    max_bytes: int = 4_000_000  # bytes of text kept at most
    chunk_bytes: int = 1024  # the text is dealt to shards in chunks of this many bytes
    block_size: int = 64  # bytes per training window (a gpt's block_size or less)
    eval_chunks: int = 64  # chunks held out for evaluation
    split_seed: int = 0  # seed of the train/eval split

    def __post_init__(self) -> None:
        if self.chunk_bytes < self.block_size + 1:
            raise ConfigError(
                f"chunk_bytes ({self.chunk_bytes}) must exceed block_size ({self.block_size})"
            )
        if not self.sources and not self.data_digest:
            raise ConfigError("a text dataset needs at least one source or user data")
        if self.max_bytes < 1:
            raise ConfigError("max_bytes must be positive")
        if self.data_digest and not is_digest(self.data_digest):
            raise ConfigError(f"data_digest {self.data_digest[:80]!r} is not a hex content digest")

    def build(self, data: Path | str | None = None) -> TextDataset:
        """The dataset, reading the user's file `data` when the config names user data."""
        files = [self.check_data(data)] if data is not None or self.data_digest else []
        corpus = load_corpus(self.sources, files, max_bytes=self.max_bytes)
        return TextDataset(self, corpus)

    def check_data(self, data: Path | str | None) -> str:
        """`data` as a path, if it is the user data this config names; ConfigError otherwise
        (the message names both digests, so a user can tell which file the run expects)."""
        return check_user_data(self.data_digest, data)


class TextDataset:
    vocab_size = 256

    def __init__(self, config: TextDatasetConfig, data: bytes) -> None:
        n_chunks = len(data) // config.chunk_bytes
        if n_chunks <= config.eval_chunks:
            raise ConfigError(
                f"{len(data)} bytes of text are too few for {config.eval_chunks} eval chunks"
            )
        self.config = config
        self.digest = corpus_digest(data)
        flat = torch.frombuffer(bytearray(data[: n_chunks * config.chunk_bytes]), dtype=torch.uint8)
        self.chunks = flat.view(n_chunks, config.chunk_bytes)
        self.eval_index, self.train_index = split_eval(
            n_chunks, config.eval_chunks, config.split_seed
        )

    @property
    def num_bytes(self) -> int:
        return self.chunks.numel()

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> WindowBatches:
        """Batches from shard `shard` of `num_shards`; the run `seed` decides the deal and draws."""
        rows = shard_indices(self.train_index, shard, num_shards, seed)
        return WindowBatches(
            self.chunks[rows],
            block_size=self.config.block_size,
            batch_size=batch_size,
            seed=seeded_int("text-shard", seed, shard, num_shards),
        )

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]:
        """Non-overlapping windows tiling the eval chunks, in a fixed order."""
        chunks = self.chunks[self.eval_index].long()
        return tile_windows(chunks, self.config.block_size, batch_size)[:max_batches]
