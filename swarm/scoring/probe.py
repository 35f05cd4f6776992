"""What one update is worth: the loss it removes, on batches nobody could prepare for.

A DiLoCo update is Δ_i = θ_global − θ_i, the sender's model after its inner steps subtracted
from the round's start, so θ_global − Δ_i is the model the sender claims to have trained. Its
worth is measured on two probes, both drawn by a seed that exists only once the round's start
state does (the previous round's checksum), so no sender can fit its update to them in advance:

    heldout_gain_i = L_heldout(θ_global) − L_heldout(θ_global − Δ_i)
    shard_gain_i   = L_shard(i)(θ_global) − L_shard(i)(θ_global − Δ_i)

`heldout` batches come from the run's evaluation split, `shard(i)` batches from the training
shard the run assigned to sender i. Honest work lowers both, its own shard at least as much as
held-out data. A zero update gains nothing, noise or a sign flip gains less than nothing, and an
update trained elsewhere (a copy of another member's, or one fitted to the evaluation split)
gains on held-out data more than on the sender's own shard: `fit = shard_gain − heldout_gain`
tells which (rating.py turns the two into credit).

The d-dimensional work is two forward passes per update per probe batch, on a copy of the model
so the member's own training state is never touched (`Probe` owns that copy).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.inner_loop import evaluate
from torch import nn

Batch = tuple[Any, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Gain:
    """What one update removed from the loss (positive: it helped)."""

    heldout: float
    shard: float
    base: float = 0.0  # L_heldout(θ_global) itself: the scale a harmful update is measured on

    @property
    def fit(self) -> float:
        """How much better it does on the sender's own shard than on held-out data."""
        return self.shard - self.heldout


def pick(salt: bytes, label: str, population: int, k: int) -> list[int]:
    """`k` distinct indices of `population`, drawn from a hash of (salt, label): the same on
    every member that agrees on the round's start state, unknown before it exists."""
    k = min(k, population)
    seed = int.from_bytes(hashlib.blake2b(salt + label.encode(), digest_size=8).digest(), "big")
    order = torch.randperm(population, generator=torch.Generator().manual_seed(seed >> 1))
    return sorted(order[:k].tolist())


class Probe:
    """Scores updates against one round's start state θ_global on the seeded probe batches."""

    def __init__(
        self,
        model: nn.Module,
        *,
        heldout: Sequence[Batch],
        shard_batches: Callable[[int], Callable[[int], Batch]],
        batches: int = 2,
        shard_steps: int = 1024,
    ) -> None:
        """`model`: the run's model (copied once); `heldout`: the pool of held-out batches;
        `shard_batches(shard)`: batch-by-step of a training shard; `batches`: per probe."""
        self.model = copy.deepcopy(model)
        self.layout = ParamLayout(self.model)
        self.heldout_pool = list(heldout)
        self.shard_batches = shard_batches
        self.batches = batches
        self.shard_steps = shard_steps
        self._shards: dict[int, Callable[[int], Batch]] = {}

    def heldout(self, salt: bytes) -> list[Batch]:
        chosen = pick(salt, "heldout", len(self.heldout_pool), self.batches)
        return [self.heldout_pool[i] for i in chosen]

    def shard(self, salt: bytes, shard: int) -> list[Batch]:
        if shard not in self._shards:
            while len(self._shards) >= 64:  # bounded: at most the run's shard count is used
                del self._shards[next(iter(self._shards))]
            self._shards[shard] = self.shard_batches(shard)
        batch = self._shards[shard]
        return [batch(step) for step in pick(salt, f"shard{shard}", self.shard_steps, self.batches)]

    def gains(
        self,
        theta: torch.Tensor,
        deltas: Sequence[tuple[torch.Tensor, int]],
        salt: bytes,
    ) -> list[Gain]:
        """The gain of each (Δ, sender's shard) against θ_global `theta`."""
        heldout = self.heldout(salt)
        with torch.no_grad():
            self.layout.load(theta)
            base_heldout = evaluate(self.model, heldout)
            base_shard: dict[int, tuple[list[Batch], float]] = {}
            for _, shard in deltas:
                if shard not in base_shard:
                    batches = self.shard(salt, shard)
                    base_shard[shard] = (batches, evaluate(self.model, batches))
            out = []
            for delta, shard in deltas:
                self.layout.load(theta - delta)
                batches, base = base_shard[shard]
                out.append(
                    Gain(
                        heldout=base_heldout - evaluate(self.model, heldout),
                        shard=base - evaluate(self.model, batches),
                        base=base_heldout,
                    )
                )
        return out
