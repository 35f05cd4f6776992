"""DHT swarms of real libp2p hosts (node.host.build_host) in one trio process, on loopback."""

from __future__ import annotations

import pytest
from peertrain.dht.testing import open_dht_swarm, without_auto_connect
from peertrain.node.host import build_host
from peertrain.node.identity import Identity


def make_host():
    return without_auto_connect(build_host(Identity.generate()))


@pytest.fixture
def dht_swarm():
    """`async with dht_swarm(16, config=...) as swarm:` — listening nodes; call `join_all`."""

    def start(n, **kwargs):
        return open_dht_swarm(n, make_host, **kwargs)

    return start
