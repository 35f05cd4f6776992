"""Who owns which shard in a round: every member of the counted group owns about one shard, in
an order drawn from the round's seed, and the next members stand by in turn if it is silent."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def owner_order(members: Sequence[str], shard: int, *, round_: int, salt: bytes) -> list[str]:
    """The members in the order they take shard `shard` on: the owner first, then the backups.
    `members` must be the round's counted group, the same list on every member."""
    group = sorted(members)
    seed = hashlib.blake2b(round_.to_bytes(8, "big") + salt, digest_size=8).digest()
    offset = int.from_bytes(seed, "big") % len(group)
    return [group[(shard + offset + j) % len(group)] for j in range(len(group))]
