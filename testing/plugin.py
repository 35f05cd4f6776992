"""The pytest plugin: peertrain's swarm fixtures in any project's tests, with no conftest copying.

Registered as an entry point (`pytest11`), so `pip install peertrain` is all a user needs:

    async def test_my_model_trains_in_a_group(test_swarm):
        async with test_swarm(3) as nodes:
            ...

    def test_my_cli_flow(daemons):
        with daemons(2) as (first, second):
            ...

Async tests need pytest-trio (`trio_mode = true` or `@pytest.mark.trio`).
"""

from __future__ import annotations

import pytest

from .swarms import cli_daemons, open_test_swarm


@pytest.fixture
def test_swarm():
    """`async with test_swarm(3) as nodes:` — in-process daemons on loopback, node i > 0
    bootstrapped from node 0."""
    return open_test_swarm


@pytest.fixture
def daemons(tmp_path):
    """`with daemons(3) as ds:` — `peertrain` daemon processes with homes under tmp_path."""

    def start(n, **kwargs):
        return cli_daemons(n, tmp_path, **kwargs)

    return start
