"""Files of content-addressed checkpoints: blake2b names, atomic writes, crash leftovers.

Shared by DiLoCo member checkpoints (diloco/member/checkpoint.py), SWARM stage checkpoints
(pipeline/checkpoint.py) and the node's own files of a run (manifest, certificate, data path):
every durable write goes through `write_atomic` (tests/hostile/test_kill_points.py kills a writer
at each of its steps). A file is written under a temporary name, fsynced, renamed and its
directory fsynced, so a crash leaves the old file or the new one, plus a temporary to remove.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

TMP_PREFIX = ".tmp-"
_HEX = frozenset("0123456789abcdef")


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def is_hash(name: str) -> bool:
    """Whether `name` can be a `content_hash` (so a path built from it stays in its folder)."""
    return len(name) == 64 and set(name) <= _HEX


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{TMP_PREFIX}{secrets.token_hex(8)}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_temporaries(directory: Path) -> None:
    """Temporary files a crash mid-write left behind."""
    for stale in directory.glob(TMP_PREFIX + "*"):
        stale.unlink(missing_ok=True)
