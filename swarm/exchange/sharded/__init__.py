"""The sharded update exchange: robust aggregation at all-reduce cost, with owners held to
account. `ShardedRound` (round.py) is one member's state for one round and `run_round`
(member.py) runs it; the transport seam is transport.py, its in-memory implementation
testing/shard_network.py."""

from __future__ import annotations

from .member import run_round
from .round import ShardedResult, ShardedRound
from .transport import FetchFailed, ShardTransport

__all__ = ["FetchFailed", "ShardTransport", "ShardedResult", "ShardedRound", "run_round"]
