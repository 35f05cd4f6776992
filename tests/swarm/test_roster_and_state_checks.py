"""Whose updates count (roster.py) and which downloaded states may be used (trust.py), as pure
functions: a wave of fresh IDs takes rounds to arrive, and a state is checked whoever vouches."""

from __future__ import annotations

import torch
from peertrain.swarm.diloco.group.roster import Roster
from peertrain.swarm.diloco.group.trust import DRIFT_PER_ROUND, StateCheck


def test_a_wave_of_fresh_ids_joins_the_counted_group_at_the_admission_rate_only():
    roster = Roster(max_members=8, admit_per_round=2, protected={"anchor"})
    honest = {"anchor", "h1"}
    sybils = {f"sybil-{i:02d}" for i in range(30)}
    sizes = []
    for round_ in range(6):
        group = roster.advance(round_, honest | sybils, salt=b"state-%d" % round_)
        sizes.append(len(group))
        assert "anchor" in group
    assert sizes == [3, 5, 7, 8, 8, 8]  # +2 per round (the anchor is never queued), capped at 8
    assert roster.advance(5, honest | sybils, salt=b"other") == group  # decided once per round


def test_members_agreeing_on_the_start_state_compute_the_same_group():
    candidates = {f"peer-{i}" for i in range(20)}
    a = Roster(max_members=64, admit_per_round=3)
    b = Roster(max_members=64, admit_per_round=3)
    assert a.advance(4, candidates, b"same") == b.advance(4, candidates, b"same")
    c = Roster(max_members=64, admit_per_round=3)
    assert c.advance(4, candidates, b"another start") != a.counted  # nobody can grind a rank


def test_invite_rosters_have_no_rate_but_keep_the_cap():
    roster = Roster(max_members=5, admit_per_round=None)
    assert len(roster.advance(0, {f"m{i}" for i in range(9)}, b"s")) == 5


CHECK = StateCheck(numel=4, newest_trusted_round=7)
OWN = torch.tensor([1.0, 2.0, 2.0, 4.0])  # norm 5


def _state(params: list[float]) -> torch.Tensor:
    return torch.tensor([*params, 0.0, 0.0, 0.0, 0.0])


def test_a_state_is_refused_when_not_finite_of_the_wrong_size_or_from_the_future():
    assert CHECK.problem(_state([1, 2, 2, 4]), 7, None, 0) is None
    assert "NaN" in CHECK.problem(_state([1, float("nan"), 2, 4]), 7, None, 0)
    assert "values" in CHECK.problem(torch.zeros(6), 7, None, 0)
    assert "beyond" in CHECK.problem(_state([1, 2, 2, 4]), 8, None, 0)


def test_a_running_member_refuses_a_state_too_far_from_its_own():
    one_round = DRIFT_PER_ROUND * 5.0
    near = OWN + torch.tensor([one_round * 0.99, 0, 0, 0])
    far = OWN + torch.tensor([one_round * 1.01, 0, 0, 0])
    assert CHECK.problem(_state(near.tolist()), 5, OWN, 5) is None
    assert "from ours" in CHECK.problem(_state(far.tolist()), 5, OWN, 5)
    # the bound grows with the rounds the state is ahead of ours
    assert CHECK.problem(_state(far.tolist()), 6, OWN, 5) is None
    assert CHECK.problem(_state(far.tolist()), 5, None, 0) is None  # a joiner has no own state


def test_the_first_group_may_hold_the_quorum_the_creator_signed():
    roster = Roster(max_members=64, admit_per_round=2, protected={"anchor"}, first_round=6)
    candidates = {"anchor", *(f"m{i}" for i in range(9))}
    assert len(roster.advance(0, candidates, b"s")) == 6
    assert len(roster.advance(1, candidates, b"t")) == 8  # then the rate again


def test_a_member_that_sent_nothing_in_time_queues_again_as_a_newcomer():
    roster = Roster(max_members=64, admit_per_round=1, first_round=3)
    assert roster.advance(0, {"a", "b", "withholder"}, b"s") == {"a", "b", "withholder"}
    roster.contributed({"a", "b"})  # the withholder announced a state but no update
    group = roster.advance(1, {"a", "b", "withholder", "new"}, b"t")
    assert {"a", "b"} < group and len(group) == 3  # one of the two newcomers, at the rate
