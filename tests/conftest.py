"""Shared fixtures: real in-process nodes and real CLI daemons (see peertrain.testing)."""

from __future__ import annotations

import pytest
from peertrain.testing import cli_daemons, open_test_swarm


@pytest.fixture
def test_swarm():
    """`async with test_swarm(3) as nodes:` — in-process daemons on loopback."""
    return open_test_swarm


@pytest.fixture
def daemons(tmp_path):
    """`with daemons(3) as ds:` — CLI daemon processes with homes under tmp_path."""

    def start(n, **kwargs):
        return cli_daemons(n, tmp_path, **kwargs)

    return start
