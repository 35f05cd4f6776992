"""A fragment update's sample count: 8 bytes before the codec's bytes, clipped, made a weight.

Members of unequal speed take unequal numbers of inner steps between two syncs of a fragment, so
their pseudo-gradients stand for unequal amounts of data. The count rides in the payload (the
checksum its sender signs covers it), and nobody's claim is taken as is: it is clipped to what a
member at the run's pace does in a fragment round (`max_samples`), as run trust clips the claims
of SWARM contributions. Equal claims leave the inputs untouched, so lockstep members aggregate
exactly as plain DiLoCo does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import torch
from peertrain.swarm.exchange.codec import Payload
from peertrain.swarm.exchange.interface import Contribution

HEADER = struct.Struct("<Q")


def with_samples(samples: int, payload: Payload) -> bytes:
    return HEADER.pack(samples) + bytes(payload)


def split_samples(
    contributions: Sequence[Contribution], max_samples: int
) -> tuple[list[Contribution], dict[str, int], list[tuple[str, str]]]:
    """(contributions without the header, clipped claim by sender, refused (sender, why))."""
    stripped: list[Contribution] = []
    claims: dict[str, int] = {}
    refused: list[tuple[str, str]] = []
    for c in contributions:
        if len(c.payload) < HEADER.size:
            refused.append((c.sender, "payload too short for its sample count"))
            continue
        (claim,) = HEADER.unpack_from(c.payload)
        claims[c.sender] = min(claim, max_samples)
        body = memoryview(c.payload)[HEADER.size :]
        stripped.append(Contribution(sender=c.sender, payload=body, checksum=c.checksum))
    return stripped, claims, refused


def weigh(deltas: list[torch.Tensor], claims: Sequence[int]) -> tuple[float, ...]:
    """Scale each Δ in place by n·claim/Σclaims, so the group's mean becomes the sample-weighted
    mean; returns the weights (claim/Σclaims). Equal or all-zero claims change nothing."""
    total = sum(claims)
    if not deltas or total == 0 or len(set(claims)) == 1:
        return tuple(1 / len(deltas) for _ in deltas)
    weights = tuple(c / total for c in claims)
    for delta, w in zip(deltas, weights, strict=True):
        delta.mul_(len(deltas) * w)
    return weights
