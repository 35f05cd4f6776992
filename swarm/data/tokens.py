"""Token files: a flat array of token ids on disk (nanoGPT's train.bin: uint16, or uint32 for
vocabularies over 65 536), memory-mapped: a file larger than memory trains like a small one.

The array is cut into chunks of `chunk_tokens` like text (swarm/data/text.py): a fixed random
`eval_chunks` are held out, the rest dealt into member shards, windows never cross a chunk. Only
the windows drawn are read from disk. The file is the member's own (`--data PATH`), named in the
spec by its digest like any user data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..models.config import ConfigError
from .batches import Batch, WindowBatches, tile_windows
from .shards import seeded_int, shard_indices, split_eval
from .user_data import check_user_data, is_digest

DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenDatasetConfig:
    """`data_digest`: the token file's digest; `dtype`: how its ids are stored."""

    # the token file, by content digest (run create --data FILE.bin fills it in)
    data_digest: str = ""
    dtype: str = "uint16"  # how the file stores token ids: uint16 (nanoGPT) or uint32
    chunk_tokens: int = 1024  # tokens are dealt to shards in chunks of this many
    block_size: int = 64  # tokens per training window
    eval_chunks: int = 64  # chunks held out for evaluation
    split_seed: int = 0  # seed of the train/eval split

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"token dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.chunk_tokens < self.block_size + 1 or self.block_size < 1:
            raise ConfigError(
                f"chunk_tokens ({self.chunk_tokens}) must exceed block_size ({self.block_size})"
            )
        if not is_digest(self.data_digest):
            raise ConfigError(
                "a tokens dataset trains on a token file named by its digest: create the run "
                "with --dataset tokens --data FILE.bin"
            )

    def check_data(self, data: Path | str | None) -> str:
        return check_user_data(self.data_digest, data)

    def build(self, data: Path | str | None = None) -> TokenDataset:
        return TokenDataset(self, Path(self.check_data(data)))


class TokenDataset:
    def __init__(self, config: TokenDatasetConfig, path: Path) -> None:
        dtype = DTYPES[config.dtype]
        size = path.stat().st_size
        if size % np.dtype(dtype).itemsize:
            raise ConfigError(f"{path} holds {size} bytes, not a whole number of {config.dtype}")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        n_chunks = len(tokens) // config.chunk_tokens
        if n_chunks <= config.eval_chunks:
            raise ConfigError(
                f"{len(tokens)} tokens are too few for {config.eval_chunks} eval chunks of "
                f"{config.chunk_tokens}"
            )
        self.config = config
        self.digest = config.data_digest
        self.path = path
        self.chunks = tokens[: n_chunks * config.chunk_tokens].reshape(n_chunks, -1)
        self.eval_index, self.train_index = split_eval(
            n_chunks, config.eval_chunks, config.split_seed
        )

    def tokenizer(self) -> Any | None:
        """The tokenizer the file was made with, when `peertrain data prepare-corpus` left it
        beside the file (tokenizer.json) and `tokenizers` is installed: samples decode with it."""
        path = self.path.parent / "tokenizer.json"
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return None
        return Tokenizer.from_file(str(path)) if path.is_file() else None

    @property
    def num_tokens(self) -> int:
        return self.chunks.size

    def train_batches(
        self, shard: int, num_shards: int, *, batch_size: int, seed: int
    ) -> WindowBatches:
        return WindowBatches(
            self.chunks,
            rows=shard_indices(self.train_index, shard, num_shards, seed),
            block_size=self.config.block_size,
            batch_size=batch_size,
            seed=seeded_int("token-shard", seed, shard, num_shards),
        )

    def eval_batches(self, *, batch_size: int, max_batches: int | None = None) -> list[Batch]:
        chunks = torch.from_numpy(self.chunks[self.eval_index.numpy()].astype(np.int64))
        return tile_windows(chunks, self.config.block_size, batch_size)[:max_batches]
