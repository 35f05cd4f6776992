"""A member's own copy of a run's data, named by content digest: a file (text, tokens) or a
folder (images). The spec carries only the digest; `--data PATH` supplies the bytes locally, and a
copy with another digest is refused naming both, so a user can tell which data the run expects.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..models.config import ConfigError
from .corpus import file_digest

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def image_files(root: Path) -> list[tuple[str, Path]]:
    """(class, file) of every image one folder below `root`, in a fixed order."""
    return [
        (folder.name, path)
        for folder in sorted(p for p in root.iterdir() if p.is_dir())
        for path in sorted(folder.iterdir())
        if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES
    ]


def folder_digest(root: Path | str) -> str:
    """Digest of an image folder: every image's class/name and content digest, in order (other
    files, such as .DS_Store, do not count)."""
    digest = hashlib.blake2b(digest_size=16)
    for label, path in image_files(Path(root).expanduser()):
        digest.update(f"{label}/{path.name}\0{file_digest(path)}\n".encode())
    return digest.hexdigest()


def is_digest(text: str) -> bool:
    return 16 <= len(text) <= 128 and all(c in "0123456789abcdef" for c in text)


def check_user_data(expected: str, data: Path | str | None, *, folder: bool = False) -> str:
    """`data` as a path, if it holds the data of digest `expected`; ConfigError otherwise."""
    kind = "folder" if folder else "file"
    if not expected:
        raise ConfigError("this run trains on no user data: leave out --data")
    if data is None:
        raise ConfigError(
            f"this run trains on user data with digest {expected}: "
            f"supply the same {kind} with --data PATH"
        )
    path = Path(data).expanduser()
    if not (path.is_dir() if folder else path.is_file()):
        raise ConfigError(f"--data {str(data)!r} does not exist or is not a {kind}")
    found = folder_digest(path) if folder else file_digest(path)
    if found != expected:
        raise ConfigError(
            f"{path} has digest {found}, but this run trains on data with digest "
            f"{expected}: a member with other data would train on something else"
        )
    return str(path)
