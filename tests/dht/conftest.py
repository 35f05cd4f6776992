"""DHT swarms of real libp2p hosts (node.host.build_host) in one trio process, on loopback.

Peer IDs are drawn from a seeded `random.Random` (the test's id and the swarm's `seed`): which
nodes are nearest a key, hold its replicas or die with them is XOR geometry, so a test's
population is the same on every run and a failure that depends on it reproduces.
"""

from __future__ import annotations

import random

import pytest
from libp2p.crypto.ed25519 import create_new_key_pair
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.testing.dht_swarm import open_dht_swarm, without_auto_connect


def make_host(rng: random.Random):
    identity = Identity.from_key_pair(create_new_key_pair(rng.randbytes(32)))
    return without_auto_connect(build_host(identity))


@pytest.fixture
def dht_swarm(request):
    """`async with dht_swarm(16, config=...) as swarm:` — listening nodes; call `join_all`."""

    def start(n, **kwargs):
        rng = random.Random(f"{request.node.nodeid}/{kwargs.get('seed', 0)}")
        return open_dht_swarm(n, lambda: make_host(rng), **kwargs)

    return start
