"""A node's identity: an Ed25519 key in its home folder, created on first use.

The key file holds libp2p's protobuf serialisation of the private key, mode 0600. A key file
readable by others is refused rather than silently fixed: on a shared machine it may already
have leaked, and the user should know.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.serialization import deserialize_private_key
from libp2p.peer.id import ID

from ..errors import IdentityError
from .names import friendly_name

KEY_FILE = "identity.key"


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """The key pair of a node and what is derived from it."""

    key_pair: KeyPair
    peer_id: ID

    @property
    def name(self) -> str:
        return friendly_name(self.peer_id.to_base58())

    @classmethod
    def from_key_pair(cls, key_pair: KeyPair) -> Identity:
        return cls(key_pair=key_pair, peer_id=ID.from_pubkey(key_pair.public_key))

    @classmethod
    def generate(cls) -> Identity:
        return cls.from_key_pair(create_new_key_pair())


def load_or_create_identity(home: Path) -> Identity:
    """Read the identity from `home`, creating home and key (0600) if they do not exist yet."""
    path = Path(home) / KEY_FILE
    if path.exists():
        return _load(path)
    identity = Identity.generate()
    _write_private(path, identity.key_pair.private_key.serialize())
    return identity


def _load(path: Path) -> Identity:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise IdentityError(
            f"{path} is readable by other users (mode {mode:o}); "
            f"run `chmod 600 {path}` if it has not leaked, or delete it to get a new identity"
        )
    try:
        private_key = deserialize_private_key(path.read_bytes())
    except Exception as exc:  # the library raises several unrelated types for bad bytes
        raise IdentityError(
            f"{path} is not a valid identity key ({exc}); move it away to start anew"
        ) from exc
    return Identity.from_key_pair(KeyPair(private_key, private_key.get_public_key()))


def _write_private(path: Path, data: bytes) -> None:
    """Write atomically with mode 0600 from the first byte (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)  # the rename itself survives a power loss
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
