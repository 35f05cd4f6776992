"""Text that every Python install already has, so a run needs no download to train a language model.

Sources, concatenated in a fixed order so every member with the same Python builds the same bytes:

- ``stdlib``: the standard library's ``*.py`` sources (tests and site-packages left out), files in
  sorted relative-path order;
- ``pydoc``: the help topics behind ``help('keywords')`` and friends (``pydoc_data.topics``);
- user text files, in the order given (named in a run spec only by digest: text.py).

Different Python versions ship different sources, so the manifest records `corpus_digest` of the
bytes; a member whose corpus differs can tell before it trains on different data.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..models.config import ConfigError

SOURCES = ("stdlib", "pydoc")
_SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})
_SEPARATOR = b"\n\n"


def stdlib_source_files() -> list[Path]:
    """The standard library's Python sources, in a deterministic (sorted relative path) order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in _SKIPPED_DIRS]  # prune the walk
        files.extend(Path(folder, name) for name in names if name.endswith(".py"))
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def pydoc_topics_text() -> bytes:
    """pydoc's help topics (the text behind ``help('if')`` and similar), in sorted topic order."""
    from pydoc_data.topics import topics

    return _SEPARATOR.join(topics[name].encode("utf-8") for name in sorted(topics))


def _source_chunks(sources: Sequence[str], files: Sequence[str]) -> Iterator[bytes]:
    for source in sources:
        if source == "stdlib":
            for path in stdlib_source_files():
                yield path.read_bytes()
        elif source == "pydoc":
            yield pydoc_topics_text()
        else:
            raise ConfigError(f"unknown text source {source!r}; choose from {', '.join(SOURCES)}")
    for name in files:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError(f"text file {name!r} does not exist or is not a file")
        yield path.read_bytes()


def load_corpus(sources: Sequence[str], files: Sequence[str] = (), *, max_bytes: int) -> bytes:
    """Concatenate the sources (then `files`), stopping once `max_bytes` are collected."""
    parts: list[bytes] = []
    total = 0
    for chunk in _source_chunks(sources, files):
        parts.append(chunk[: max_bytes - total])
        total += len(parts[-1]) + len(_SEPARATOR)
        if total >= max_bytes:
            break
    return _SEPARATOR.join(parts)[:max_bytes]


def corpus_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_digest(path: Path | str) -> str:
    """`corpus_digest` of a file's bytes, read in blocks (a user's data may be large)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(Path(path).expanduser(), "rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
