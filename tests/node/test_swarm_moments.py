"""`--late-join S|rN`: an event S seconds into a local swarm's run, or once its creator is at
round N (the same point of a run on a fast machine and a slow one)."""

from __future__ import annotations

import argparse

import pytest
from peertrain.node.cli.moments import Moment, moment


def test_seconds_come_due_with_the_clock_whatever_the_round():
    assert moment("90") == Moment(seconds=90.0)
    assert not moment("90").due(elapsed=89.9, creator_round=50)
    assert moment("90").due(elapsed=90.0, creator_round=None)


def test_a_round_comes_due_when_the_creator_is_there_whatever_the_clock():
    assert moment("r3") == Moment(round=3)
    assert not moment("r3").due(elapsed=1e6, creator_round=2)
    assert not moment("r3").due(elapsed=1e6, creator_round=None)  # no status yet
    assert moment("r3").due(elapsed=0.0, creator_round=3)


@pytest.mark.parametrize("text", ["soon", "r", "r3.5", ""])
def test_anything_else_is_refused_with_what_is_expected(text):
    with pytest.raises(argparse.ArgumentTypeError, match="seconds .* or a round"):
        moment(text)
