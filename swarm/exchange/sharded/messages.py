"""What members of a sharded round sign and broadcast. Payloads (shards of updates, shards of the
aggregate) travel point to point and are named by the digests these messages commit to.

Every number a check compares is float64 and travels as raw little-endian bytes, so every member
reads the same bits; `floats` refuses a length that is not a whole number of values.
"""

from __future__ import annotations

from typing import Annotated

import blake3
import torch
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.messages import Message, message
from peertrain.protocol.schema import IntRange, MaxLen

MAX_SHARDS = 256
MAX_MEMBERS = 256  # gossip_round.MAX_SENDERS: a round never counts more
DIGEST = 32


def digest(payload: bytes | memoryview) -> bytes:
    return blake3.blake3(payload).digest()


def pack_floats(values: torch.Tensor) -> bytes:
    return values.to(torch.float64).contiguous().numpy().tobytes()


def floats(raw: bytes, count: int, *, what: str) -> torch.Tensor:
    if len(raw) != 8 * count:
        raise DecodeError(f"{what}: {len(raw)} bytes, expected {count} float64 values")
    return torch.frombuffer(bytearray(raw), dtype=torch.float64)


@message("exchange/shard-commitment", max_size=MAX_SHARDS * (DIGEST + 16) + 256)
class ShardCommitment(Message):
    """A sender's update, committed shard by shard before anyone sees it: one commitment per
    round, so two signed ones are proof of equivocation."""

    digests: Annotated[tuple[bytes, ...], MaxLen(MAX_SHARDS)]  # blake3 of each shard's payload
    sizes: Annotated[tuple[int, ...], MaxLen(MAX_SHARDS)]  # bytes of each shard's payload
    nonce_hash: Annotated[bytes, MaxLen(DIGEST)]  # blake3 of the nonce revealed later


@message("exchange/shard-statistics", max_size=8 * MAX_MEMBERS * (MAX_MEMBERS + 1) + 16 * 1024)
class ShardStatistics(Message):
    """An owner's partial statistics of one shard over the senders it received (in this order)."""

    shard: Annotated[int, IntRange(0, MAX_SHARDS - 1)]
    senders: Annotated[tuple[str, ...], MaxLen(MAX_MEMBERS)]
    sq_norms: Annotated[bytes, MaxLen(8 * MAX_MEMBERS)]  # float64 per sender
    gram: Annotated[bytes, MaxLen(8 * MAX_MEMBERS * MAX_MEMBERS)]  # float64 p × p, or empty


@message("exchange/shard-output", max_size=512)
class ShardOutput(Message):
    """An owner's commitment to its shard of the aggregate, for one attempt of the round."""

    shard: Annotated[int, IntRange(0, MAX_SHARDS - 1)]
    attempt: Annotated[int, IntRange(0, 16)]
    digest: Annotated[bytes, MaxLen(DIGEST)]
    nbytes: Annotated[int, IntRange(0, 2**40)]
    decision: Annotated[bytes, MaxLen(DIGEST)] = b""  # the decision it was written for (decide.py)


@message("exchange/shard-reveal", max_size=256)
class NonceReveal(Message):
    """A sender's nonce, revealed once every output is committed: ρ is drawn from all of them."""

    attempt: Annotated[int, IntRange(0, 16)]
    nonce: Annotated[bytes, MaxLen(DIGEST)]


@message("exchange/shard-checks", max_size=3 * 8 * MAX_SHARDS + 256)
class SenderChecks(Message):
    """A sender's signed facts about its own shards, per shard: ⟨ρ_k, g_k⟩, ‖g_k‖² and
    ⟨g_k, out_k⟩. Anyone holding g_k (its digest is committed) can prove one false."""

    attempt: Annotated[int, IntRange(0, 16)]
    projections: Annotated[bytes, MaxLen(8 * MAX_SHARDS)]
    sq_norms: Annotated[bytes, MaxLen(8 * MAX_SHARDS)]
    rows: Annotated[bytes, MaxLen(8 * MAX_SHARDS)]
    decision: Annotated[bytes, MaxLen(DIGEST)] = b""  # decision and ρ they were computed on
