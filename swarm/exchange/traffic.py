"""What synchronous data parallel would send for the same work: the yardstick for DiLoCo traffic.

Counted the way DiLoCo's own traffic is counted, as bytes each member publishes: data parallel
publishes one fp32 gradient per member per step, DiLoCo one encoded pseudo-gradient per member per
round. (A ring all-reduce moves ~2× the payload per member, which scales both sides alike.)
"""

from __future__ import annotations


def data_parallel_bytes(
    num_params: int, *, steps: int, members: int, bytes_per_value: int = 4
) -> int:
    return num_params * bytes_per_value * steps * members
