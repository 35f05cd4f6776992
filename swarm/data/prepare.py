"""A real corpus as token files, in one step that caches by digest: `peertrain data
prepare-corpus`.

    documents (doc_corpus.py) ─ clean ─ byte-level BPE trained here (`tokenizers`) ─ token ids
        ─ cut into chunks of `chunk_tokens`; every `val_every`-th chunk to val.bin (1 %), the
          rest to train.bin (the `tokens` dataset's file: flat uint16, nanoGPT's format)

The output folder is `<out>/<key>`, `key` the digest of the documents as installed, these
settings, the cleaning rules (`FORMAT`) and the tokenizers version: a second run with the same
inputs finds it and returns at once; anything that changes the bytes changes the folder. Each
folder is written under a temporary name and renamed when complete, so a folder that exists is
whole. The BPE trainer is deterministic, so every member that prepares the same package version
gets the same train.bin, the digest a run names (`--data train.bin`).

The folder holds train.bin, val.bin, tokenizer.json (load it with `tokenizers.Tokenizer.from_file`
to decode a sample) and meta.json (sizes, token counts, digests, seconds per step).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..models.config import ConfigError
from .corpus import file_digest
from .doc_corpus import DOC_ROOT, Document, clean, documents

FORMAT = 1  # the cleaning rules and file layout; bump when either changes
META, TRAIN, VAL, TOKENIZER = "meta.json", "train.bin", "val.bin", "tokenizer.json"
END_OF_TEXT = "<|endoftext|>"  # token 0, after every document
_ENCODE_BATCH = 256  # documents encoded at once (bounds the encoder's memory)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusSettings:
    vocab_size: int = 8192  # BPE vocabulary, a multiple of 64 (the model's vocab_size)
    val_every: int = 100  # every val_every-th chunk is validation: 1 %
    chunk_tokens: int = 1024  # the unit of the train/validation split
    max_bytes: int = 0  # cleaned text kept at most (whole documents first); 0: all of it
    min_frequency: int = 2  # a pair merges only if seen this often

    def __post_init__(self) -> None:
        if self.vocab_size % 64 or not 320 <= self.vocab_size <= 1 << 32:
            raise ConfigError(
                f"vocab_size {self.vocab_size} must be a multiple of 64, at least 320 (the 256 "
                "bytes, the end-of-text token and room for merges)"
            )
        if self.val_every < 2 or self.chunk_tokens < 2 or self.max_bytes < 0:
            raise ConfigError("val_every and chunk_tokens must be at least 2, max_bytes >= 0")

    @property
    def dtype(self) -> str:
        return "uint16" if self.vocab_size <= 1 << 16 else "uint32"


@dataclass(frozen=True, slots=True)
class PreparedCorpus:
    folder: Path
    meta: dict[str, Any]
    cached: bool  # found complete, nothing computed

    @property
    def train(self) -> Path:
        return self.folder / TRAIN

    @property
    def val(self) -> Path:
        return self.folder / VAL

    @property
    def tokenizer(self) -> Path:
        return self.folder / TOKENIZER


def tokenizers_module():
    """`tokenizers`, or a ConfigError naming the extra that installs it."""
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(
            "preparing a corpus needs tokenizers: pip install 'peertrain[corpus]'"
        ) from None
    return tokenizers


def cache_key(docs: list[Document], settings: CorpusSettings) -> str:
    digest = hashlib.blake2b(digest_size=16)
    head = {"format": FORMAT, "tokenizers": tokenizers_module().__version__, **asdict(settings)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for doc in docs:
        digest.update(f"\0{doc.name}\0{len(doc.raw)}\0".encode())
        digest.update(doc.raw)
    return digest.hexdigest()


def prepare_corpus(
    source: str, out: Path | str, settings: CorpusSettings | None = None, *, doc_root=DOC_ROOT
) -> PreparedCorpus:
    """`source`'s documents as token files under `out/<key>`; found there, nothing is redone."""
    settings = settings or CorpusSettings()
    started = time.monotonic()
    where, docs = documents(source, doc_root=doc_root)
    folder = Path(out).expanduser() / cache_key(docs, settings)
    if (folder / META).is_file():
        return PreparedCorpus(folder, json.loads((folder / META).read_text()), cached=True)
    seconds = {"collect": time.monotonic() - started}
    texts = cleaned(docs, settings.max_bytes)
    seconds["clean"] = time.monotonic() - started - sum(seconds.values())
    tokenizer = train_tokenizer(texts, settings)
    seconds["tokenizer"] = time.monotonic() - started - sum(seconds.values())
    ids = encode(tokenizer, texts, settings.dtype)
    train, val = split(ids, settings)
    seconds["encode"] = time.monotonic() - started - sum(seconds.values())
    meta = {
        "source": source,
        "found_at": where,
        "documents": len(texts),
        "raw_bytes": sum(len(d.raw) for d in docs),
        "clean_bytes": sum(len(t.encode("utf-8")) for t in texts),
        "vocab_learned": tokenizer.get_vocab_size(),
        "tokens_train": int(train.size),
        "tokens_val": int(val.size),
        "tokenizers": tokenizers_module().__version__,
        "settings": {**asdict(settings), "dtype": settings.dtype},
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
    }
    return PreparedCorpus(_write(folder, tokenizer, train, val, meta), meta, cached=False)


def cleaned(docs: list[Document], max_bytes: int) -> list[str]:
    """Each document's prose (empty ones dropped), whole documents up to `max_bytes`."""
    texts, total = [], 0
    for doc in docs:
        text = clean(doc.raw)
        if not text:
            continue
        if max_bytes and total + len(text.encode("utf-8")) > max_bytes:
            rest = text.encode("utf-8")[: max_bytes - total].decode("utf-8", errors="ignore")
            texts += [rest] if rest else []
            break
        texts.append(text)
        total += len(text.encode("utf-8"))
    if not texts:
        raise ConfigError("the corpus source holds no text once cleaned")
    return texts


def train_tokenizer(texts: list[str], settings: CorpusSettings):
    """A byte-level BPE (GPT-2's scheme: any byte sequence encodes) learned from `texts`."""
    tk = tokenizers_module()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        min_frequency=settings.min_frequency,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def encode(tokenizer, texts: list[str], dtype: str) -> np.ndarray:
    """Every document's ids, each followed by the end-of-text token, as one flat array."""
    end = tokenizer.token_to_id(END_OF_TEXT)

    def pieces() -> Iterator[np.ndarray]:
        for start in range(0, len(texts), _ENCODE_BATCH):
            for encoding in tokenizer.encode_batch(texts[start : start + _ENCODE_BATCH]):
                yield np.asarray([*encoding.ids, end], dtype=dtype)

    return np.concatenate(list(pieces()))


def split(ids: np.ndarray, settings: CorpusSettings) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): chunks of `chunk_tokens`, every `val_every`-th to val; the tail trains."""
    size, every = settings.chunk_tokens, settings.val_every
    whole = len(ids) // size
    if whole < every:
        raise ConfigError(
            f"{len(ids)} tokens are too few to hold out one chunk of {size} in {every}: use more "
            "text or a smaller chunk_tokens"
        )
    chunks = ids[: whole * size].reshape(whole, size)
    held = np.arange(whole) % every == every - 1
    return np.concatenate([chunks[~held].ravel(), ids[whole * size :]]), chunks[held].ravel()


def _write(folder: Path, tokenizer, train: np.ndarray, val: np.ndarray, meta: dict) -> Path:
    """The folder, written under a temporary name and renamed once complete."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    train.tofile(partial / TRAIN)
    val.tofile(partial / VAL)
    tokenizer.save(str(partial / TOKENIZER))
    meta.update(train_digest=file_digest(partial / TRAIN), val_digest=file_digest(partial / VAL))
    (partial / META).write_text(json.dumps(meta, indent=2) + "\n")
    try:
        partial.rename(folder)
    except OSError:  # another process finished the same folder first: its bytes are ours
        shutil.rmtree(partial, ignore_errors=True)
    return folder
