"""The decision every member takes alike from the chosen statistics of every shard: whose
updates are the round's inputs, which the rule accepts, and their weights."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import blake3
import torch
from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.aggregation.errors import NotEnoughUpdates
from peertrain.swarm.aggregation.sharded import total_statistics
from peertrain.swarm.aggregation.streaming import InputStatistics, TensorSource
from peertrain.swarm.aggregation.validation import Verdict

from .messages import ShardStatistics, floats


@dataclass(frozen=True, slots=True)
class Decision:
    attempt: int
    senders: tuple[str, ...]  # in every chosen statistics, committed once, sorted
    accepted: tuple[str, ...]  # those the rule accepted
    rejected: tuple[tuple[str, str], ...]  # (sender, why) of those it refused
    stats: InputStatistics  # of the accepted, summed over shards in shard order
    weights: torch.Tensor  # a, float64, one per accepted sender
    owners: dict[int, str | None]  # shard → who writes its output (None: every member itself)
    parts: dict[int, InputStatistics]  # each shard's statistics over `senders`

    @property
    def digest(self) -> bytes:
        """Names this decision in the outputs and checks written for it: members that decided
        apart (owners raced: each chose other statistics) then see another decision's numbers,
        not a lie, and blame nobody for them."""
        owners = ",".join(f"{k}:{o}" for k, o in sorted(self.owners.items()))
        text = f"{self.attempt}|{','.join(self.accepted)}|{owners}|".encode()
        return blake3.blake3(text + self.weights.numpy().tobytes()).digest()

    def basis(self, seed: bytes) -> bytes:
        """Names what a sender's checks were computed on: this decision and ρ's seed. A nonce
        that reached some members by their deadline and not others gives them another seed,
        and honest checks under one seed look false under the other."""
        return blake3.blake3(self.digest + seed).digest()


def part_tensors(part: ShardStatistics) -> InputStatistics:
    p = len(part.senders)
    gram = floats(part.gram, p * p, what="gram").view(p, p) if part.gram else None
    return InputStatistics(sq_norms=floats(part.sq_norms, p, what="norms"), gram=gram)


def rows_of(part: ShardStatistics, senders: Sequence[str]) -> InputStatistics:
    """`part`'s statistics restricted to `senders`, in that order."""
    full = part_tensors(part)
    index = {s: i for i, s in enumerate(part.senders)}
    rows = torch.tensor([index[s] for s in senders], dtype=torch.long)
    gram = None if full.gram is None else full.gram[rows][:, rows]
    return InputStatistics(sq_norms=full.sq_norms[rows], gram=gram)


def linear_weights(rule: Aggregator, stats: InputStatistics) -> torch.Tensor:
    """a for a linear rule, from the statistics alone (the rule writes an empty output)."""
    p = stats.sq_norms.numel()
    empty = [TensorSource(torch.empty(0)) for _ in range(p)]
    report = rule.write(empty, stats, torch.empty(0))
    if report.weights is None:
        raise ValueError(f"{rule.name} is not a linear rule: the sharded exchange checks weights")
    return torch.tensor(report.weights, dtype=torch.float64)


def decide(round_, attempt: int, chosen: dict[int, tuple[str | None, ShardStatistics]]) -> Decision:
    committed = set(round_.board.committed())
    senders = sorted(committed.intersection(*(set(p.senders) for _, p in chosen.values())))
    parts = {k: rows_of(chosen[k][1], senders) for k in sorted(chosen)}
    total = total_statistics([parts[k] for k in sorted(parts)])
    verdicts = [Verdict(index=i) for i in range(len(senders))]
    reference = _indices(senders, round_.reference)
    try:
        kept, stats = round_.rule.decide(verdicts, range(len(senders)), total, reference)
        weights = linear_weights(round_.rule, stats)
    except NotEnoughUpdates as exc:  # every member alike: the round applies nothing
        kept, stats, weights = [], total, torch.zeros(0, dtype=torch.float64)
        verdicts = list(exc.verdicts)
    return Decision(
        attempt=attempt,
        senders=tuple(senders),
        accepted=tuple(senders[i] for i in kept),
        rejected=tuple((senders[v.index], f"{v.reason}: {v.detail}") for v in verdicts if v.reason),
        stats=stats,
        weights=weights,
        owners={k: owner for k, (owner, _) in chosen.items()},
        parts=parts,
    )


def _indices(senders: Sequence[str], reference: Collection[str]) -> list[int]:
    return [i for i, s in enumerate(senders) if s in reference]
