"""A deterministic fingerprint of the state every member of a group must agree on.

Members publish it in RunState after each outer step; a member whose hash differs from the majority
re-syncs. It covers the round, θ_global (each parameter's name, dtype, shape and bytes, in sorted
name order) and the outer momentum buffer, i.e. everything that decides the next outer step. Inner
AdamW state and error-feedback residuals are each member's own business and are left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

HASH_BYTES = 32


def _feed(h: hashlib._Hash, name: str, tensor: torch.Tensor) -> None:
    t = tensor.detach().contiguous().cpu()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy())  # hashed in place, no copy


def state_hash(
    round_: int, params: Mapping[str, torch.Tensor], momentum: torch.Tensor | None
) -> str:
    """Hex blake2b of (round, named parameters, momentum buffer)."""
    h = hashlib.blake2b(digest_size=HASH_BYTES, person=b"peertrain-state")
    h.update(f"round|{round_}|".encode())
    for name in sorted(params):
        _feed(h, "param/" + name, params[name])
    if momentum is not None:
        _feed(h, "outer/momentum", momentum)
    return h.hexdigest()
