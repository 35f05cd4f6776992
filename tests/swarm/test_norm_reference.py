"""Whose update norms bound a round's updates (member.py `aggregate_deltas`, driver.py): an open
run's anchors when an anchor's update is in the round, so every member judges alike, else the
member's own, which it computed and trusts. Without that tier, scaled Sybil updates that were
most of what arrived (gossip lost the honest ones) moved the median of all and got in."""

from __future__ import annotations

import torch
from peertrain.swarm.aggregation import build_aggregator
from peertrain.swarm.aggregation.validation import RUN_MAX_NORM_RATIO
from peertrain.swarm.diloco.member.member import aggregate_deltas

RULE = build_aggregator("flag", max_norm_ratio=RUN_MAX_NORM_RATIO, r=None)
TIERS = (frozenset({"anchor"}), frozenset({"me"}))


def updates(senders: list[str], scaled: set[str], seed: int = 5) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(1000 if s in scaled else 1) * torch.randn(2000, generator=gen) for s in senders]


def test_without_the_anchors_update_our_own_norm_holds_scaled_updates_out():
    senders = ["me", "honest", "sybil-1", "sybil-2", "sybil-3"]
    deltas = updates(senders, scaled={"sybil-1", "sybil-2", "sybil-3"})
    plain_accepted, plain_rejected = list(senders), []
    aggregate_deltas(RULE, 2000, plain_accepted, plain_rejected, deltas)
    assert plain_accepted == senders  # the median of all is a scaled norm: everything passes

    accepted, rejected = list(senders), []
    update = aggregate_deltas(RULE, 2000, accepted, rejected, deltas, TIERS)
    assert accepted == ["me", "honest"]
    assert [who for who, _ in rejected] == ["sybil-1", "sybil-2", "sybil-3"]
    assert update is not None and update.norm() < 2 * max(d.norm() for d in deltas[:2])


def test_with_the_anchors_update_present_every_member_judges_by_it():
    senders = ["anchor", "me", "other", "sybil-1", "sybil-2"]
    deltas = updates(senders, scaled={"sybil-1", "sybil-2"})
    deltas[1] = deltas[1] * 3.9  # our own update is large, the anchor's is not
    mine, theirs = list(senders), list(senders)
    aggregate_deltas(RULE, 2000, mine, [], deltas, TIERS)
    aggregate_deltas(RULE, 2000, theirs, [], deltas, (frozenset({"anchor"}), frozenset({"other"})))
    assert mine == theirs == ["anchor", "me", "other"]  # one verdict, whoever computes it
