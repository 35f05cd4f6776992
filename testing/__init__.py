"""peertrain.testing — helpers for testing peertrain and code built on it: real nodes in one
process, CLI daemons, memory networks with seeded faults, netns worlds, an attacker's toolkit.

May import every layer; no product layer imports it (tests/test_layering.py). The pytest plugin
(`peertrain.testing.plugin`, registered as an entry point) turns these into fixtures.

    swarms.py        open_test_swarm (in-process daemons), cli_daemons (processes)
    waiting.py       wait_until / wait_until_sync: one way to wait for a condition
    crdt_network.py  MemoryRouter: replicas on a seeded fault-injecting in-memory network
    dht_swarm.py     DHT nodes on real hosts in one process
    diloco_group.py  LocalGroup: a DiLoCo group's rounds in one thread
    netns.py         network-namespace worlds with NAT routers (root only)
    attacks.py       Attacker: garbage frames, floods, slowloris, Sybil waves
"""

from __future__ import annotations

from .swarms import cli_daemons, free_tcp_port, open_test_swarm
from .waiting import wait_until, wait_until_sync


def __getattr__(name: str):
    # The heavier helpers load on first use: `import peertrain.testing` stays light, and the
    # torch-backed DiLoCo group only loads for tests that use it.
    lazy = {
        "LocalGroup": (".diloco_group", "LocalGroup"),
        "MemoryRouter": (".memory_router", "MemoryRouter"),
        "Faults": (".memory_router", "Faults"),
        "open_memory_router": (".memory_router", "open_memory_router"),
        "Attacker": (".attacks", "Attacker"),
    }
    if name in lazy:
        import importlib

        module, attr = lazy[name]
        return getattr(importlib.import_module(module, __name__), attr)
    raise AttributeError(name)


__all__ = ["cli_daemons", "free_tcp_port", "open_test_swarm", "wait_until", "wait_until_sync"]
