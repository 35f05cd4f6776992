"""The Kademlia key space: 256-bit keys, XOR distance, bucket indices.

Peers and records live in the same space. A peer's position is sha256 of its peer ID bytes and a
record's is sha256 of its key string, so neither a peer ID (which embeds a public key a peer
chooses) nor a key name can be aimed at a chosen spot without a sha256 preimage search per try.
Distances are plain Python ints: XOR and `bit_length` on 256-bit ints cost well under a
microsecond, which is cheaper than any byte-array representation.
"""

from __future__ import annotations

import hashlib

from libp2p.peer.id import ID

KEY_BITS = 256


def key_of_bytes(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest(), "big")


def peer_key(peer: ID) -> int:
    """Where a peer sits in the key space."""
    return key_of_bytes(peer.to_bytes())


def record_key(key: str) -> int:
    """Where a record key sits in the key space."""
    return key_of_bytes(key.encode())


def key_to_bytes(key: int) -> bytes:
    return key.to_bytes(KEY_BITS // 8, "big")


def key_from_bytes(data: bytes) -> int:
    if len(data) != KEY_BITS // 8:
        raise ValueError(f"a key is {KEY_BITS // 8} bytes, got {len(data)}")
    return int.from_bytes(data, "big")


def distance(a: int, b: int) -> int:
    return a ^ b


def bucket_index(own: int, other: int) -> int:
    """Length of the common prefix of `own` and `other`: 0 is the far half of the space.

    Equal keys have no bucket (a peer is not in its own table); callers exclude them.
    """
    return KEY_BITS - (own ^ other).bit_length()


def random_key_in_bucket(own: int, index: int, rand_bits: int) -> int:
    """A key sharing exactly `index` leading bits with `own` (for refreshing that bucket).

    `rand_bits` supplies the free low bits; the bit right after the shared prefix is flipped.
    """
    flip = 1 << (KEY_BITS - 1 - index)
    low_mask = flip - 1
    return ((own ^ flip) & ~low_mask) | (rand_bits & low_mask)
