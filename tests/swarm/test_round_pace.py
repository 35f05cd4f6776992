"""Rounds close on the living: a member whose connection closed, or who is silent beyond its
pace, is not waited for until the deadline (swarm/exchange/round_pace.py)."""

from __future__ import annotations

import pytest
import trio
from peertrain.swarm.exchange.round_pace import PACE_FLOOR, RoundPace, straggler_allowance

from .test_update_gossip import NBYTES, Group, run_round


@pytest.fixture
def group(memory_router):  # memory_router: peertrain's pytest plugin
    return Group(memory_router)


async def test_a_member_whose_connection_closed_before_it_announced_is_not_waited_for(
    group, autojump_clock
):
    members = [group.add() for _ in range(2)]
    killed = group.add()  # counted, leased for 30 s more, but its process is gone
    started = trio.current_time()

    async def kill_soon():
        await trio.sleep(1.0)
        for member in members:
            member.left(killed.me)  # the node's `Departures`: its last connection closed

    async with trio.open_nursery() as nursery:
        nursery.start_soon(kill_soon)
        results = await run_round(members, deadline=60.0)
    assert trio.current_time() - started < 2.0  # not the 60 s deadline
    assert all(len(r) == 2 for r in results.values())


async def test_a_member_that_left_after_announcing_is_still_pulled_from_its_holders(group):
    members = [group.add() for _ in range(3)]
    results = await run_round(members[:1] + members[1:], deadline=5.0)  # everyone announced
    members[0].left(members[1].me)  # too late to matter: its update is in
    assert all(len(r) == 3 for r in results.values())


async def test_a_frozen_member_is_dropped_once_silent_beyond_its_pace(group, autojump_clock):
    """A SIGSTOPped process keeps its connections and its lease and says nothing. After three
    rounds in which it kept pace, its silence is overdue after max(PACE_FLOOR, 3 × its median
    lag)."""
    members = [group.add() for _ in range(3)]
    for round_ in range(3):
        await run_round(members, round_=round_, deadline=60.0)
    frozen = members.pop()
    started = trio.current_time()
    results = await run_round(members, round_=3, deadline=60.0)
    assert trio.current_time() - started < PACE_FLOOR + 1.5
    assert all(frozen.me not in {c.sender for c in r} and len(r) == 2 for r in results.values())


async def test_silence_is_waited_for_until_the_deadline_while_no_pace_explains_it(
    group, autojump_clock
):
    members = [group.add() for _ in range(2)]
    newcomer = group.add()  # expected, never heard before: no lags
    started = trio.current_time()
    await run_round(members, deadline=20.0)
    assert trio.current_time() - started >= 20.0
    assert "no announcement" in members[0]._rounds[0].why_missing(newcomer.me)


async def test_a_member_whose_update_alone_is_in_drops_nobody_by_pace(group, autojump_clock):
    """While our own update is the only one in, nobody is dropped by pace. A member early by
    more than the floor (restarted, or its peers busy serving a download) used to drop every
    healthy peer by pace and close the round with its own update alone; now it waits for them."""
    members = [group.add() for _ in range(3)]
    for round_ in range(3):  # everyone's pace is known: patience is the floor
        await run_round(members, round_=round_, deadline=60.0)
    early, late = members[0], members[1:]
    results = {}

    async def exchange(member, after):
        await trio.sleep(after)
        results[member.me] = await member.exchange(
            3, bytes([len(results)]) * NBYTES, deadline=trio.current_time() + 60.0
        )

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(exchange, early, 0.0)
        for member in late:
            nursery.start_soon(exchange, member, 3 * PACE_FLOOR)
    assert trio.current_time() - start >= 3 * PACE_FLOOR  # it waited for another update
    assert len(results[early.me]) >= 2  # never alone (once one is in, pace applies as ever)
    assert all(len(results[m.me]) == 3 for m in late)


def test_patience_is_three_median_lags_and_never_under_the_floor():
    pace = RoundPace()
    for lag in (4.0, 5.0, 30.0):  # one slow round does not move the median much
        pace.closed({"a": 0.0, "slow": lag, "quick": 0.1}, counted={"a", "slow", "quick"})
    assert pace.patience("slow") == 3 * 5.0
    assert pace.patience("quick") == PACE_FLOOR
    assert pace.patience("a") == PACE_FLOOR


def test_a_long_inner_phase_widens_what_pace_explains():
    """Members end a 330 s inner phase tens of seconds apart: 2 s lags of short rounds must not
    drop one 20 s behind us then."""
    pace = RoundPace()
    for _ in range(3):
        pace.closed({"a": 0.0, "b": 2.0}, counted={"a", "b"})
    assert pace.patience("b") == 6.0
    pace.allowance = straggler_allowance(330.0)
    assert pace.patience("b") == pytest.approx(49.5)
    assert pace.overdue({"b"}, first=0.0, now=20.0) == {}
    assert straggler_allowance(0.5) < 0.1  # a toy round's inner phase adds nothing that matters


def test_strangers_get_no_pace_and_no_table_slot():
    pace = RoundPace()
    for _ in range(3):
        pace.closed({"member": 0.0, "stranger": 0.5}, counted={"member"})
    assert pace.patience("stranger") is None and pace.patience("member") == PACE_FLOOR


async def test_a_member_that_left_is_not_waited_for_in_later_rounds_until_it_is_back(
    group, autojump_clock
):
    """Its lease lives 30 s after its process died: rounds opened in that time would each wait
    for it. Once a connection to it opens again, it is waited for as any member."""
    members = [group.add() for _ in range(2)]
    killed = group.add()
    for member in members:
        member.left(killed.me)
    for round_ in (0, 1):
        started = trio.current_time()
        await run_round(members, round_=round_, deadline=60.0)
        assert trio.current_time() - started < 1.0
    for member in members:
        member.back(killed.me)  # restarted: expected again (and silent: no pace explains it)
    started = trio.current_time()
    await run_round(members, round_=2, deadline=20.0)
    assert trio.current_time() - started >= 20.0


async def test_fresh_keys_that_come_and_go_cannot_push_a_departed_member_out_of_the_gone_table(
    group, autojump_clock
):
    """Peer IDs are free: connections of fresh keys opened and closed in the thousands must not
    evict a departed member's entry, or rounds would wait for it again."""
    members = [group.add() for _ in range(2)]
    killed = group.add()
    for member in members:
        member.left(killed.me)
        for index in range(3000):
            member.left(f"12D3KooWstranger{index}")
    started = trio.current_time()
    await run_round(members, round_=0, deadline=60.0)
    assert trio.current_time() - started < 1.0
    assert all(len(m.pace.gone) <= 64 for m in members)
