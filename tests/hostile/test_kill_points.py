"""A daemon SIGKILLed at any step of any durable write restarts on intact data: the value from
before the write or the one after, never a torn file, never an error that keeps it from its run
(testing/kill_points.py: real product writers in child processes, killed at each system call)."""

from __future__ import annotations

import pytest
from peertrain.testing.kill_points import SITES, count_points, kill_at


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_kill_at_every_step_of_a_write_leaves_the_old_value_or_the_new(site, tmp_path):
    points = count_points(site, tmp_path / "count")
    torn = []
    for point in range(points):
        outcome = kill_at(site, tmp_path / f"kill-{point}", point)
        assert outcome.killed, f"{site}: the writer outlived its kill point {point}"
        if outcome.loaded not in outcome.allowed:
            torn.append(f"point {point}: {outcome.loaded[:80]!r}")
    assert torn == [], f"{site}: {len(torn)} of {points} kill points load torn data: {torn}"
    assert points >= 4  # open, write, fsync, rename at the least: a durable write's steps


def test_the_suite_kills_at_twenty_points_or_more(tmp_path):
    total = sum(count_points(site, tmp_path / site) for site in SITES)
    assert total >= 20
