"""peertrain.testing — helpers for testing peertrain and code built on it: real nodes in one
process, CLI daemons, one seeded fault-injecting memory network, netns worlds, attack tools.

May import every layer; no product layer imports it (tests/test_layering.py). The pytest plugin
(`peertrain.testing.plugin`, the `peertrain` pytest11 entry point) turns these into fixtures.

    swarms.py         open_test_swarm: in-process daemons on loopback; free_tcp_port
    processes.py      cli_daemons: `peertrain node start` processes; cli_json: a command's JSON;
                      DIGITS_MLP: the flags of the small run the CLI tests create
    waiting.py        wait_until / wait_until_sync: one way to wait for a condition
    metrics.py        scrape_metrics: a node's /metrics, parsed by prometheus_client
    browser.py        launch_chromium: Debian's chromium headless, through Playwright
    memory_router.py  MemoryRouter: the CRDT and update-gossip transports in memory, seeded faults
    crdt_network.py   open_memory_swarm: replicators of one run on a MemoryRouter
    dht_swarm.py      DHT nodes on real hosts in one process
    diloco_group.py   LocalGroup, InProcessExchange: a DiLoCo group's rounds in one process
    intra_node.py     one node of two ranks (torch.distributed) as processes: python -m …
    streaming_group.py  StreamingGroup: Streaming DiLoCo's staggered, overlapped exchanges
    shaped_link.py    TokenBucket: a fixed-rate uplink (MemoryRouter(uplink=...) uses one per peer)
    sim_*.py          the scale simulation's Internet: residential links from published
                      measurements (sim_links), one event heap (sim_net), SimHost under the
                      real DHT (sim_host, sim_dht), a gossip mesh under the real replicator and
                      update gossip (sim_gossip), what benchmarks/scale_sim.py measures
                      (sim_scenarios)
    byte_streams.py   connected in-memory byte streams behind libp2p's stream interface
    netns.py          network-namespace worlds with NAT routers (root only)
    netns_lan.py      Lan: members on one bridge, each link lossy, slow or cut (root only)
    tap_relay.py      TapRelay: netem in user space, for kernels without sch_netem
    attacks.py        Attacker: garbage frames, floods, slowloris, Sybil waves
    pipelines.py      through_stages: one microbatch through stage servers by hand
    pipeline_memory.py   MemoryStageNetwork: both pipeline transports in one process
    pipeline_harness.py  open_in_process_swarm: a whole SWARM pipeline run on it
    pipeline_local_run.py  run_local: one in-process pipeline run and its throughput report
    plugin.py         the pytest fixtures
"""

from __future__ import annotations

import importlib

from .waiting import wait_until, wait_until_sync

# Everything else loads on first use: `import peertrain.testing` (and so the pytest plugin, which
# every pytest session of a user loads) stays light; libp2p hosts and torch load for tests that
# use them.
_LAZY = {
    "open_test_swarm": ".swarms",
    "cli_daemons": ".processes",
    "cli_json": ".processes",
    "DIGITS_MLP": ".processes",
    "free_tcp_port": ".swarms",
    "scrape_metrics": ".metrics",
    "MemoryRouter": ".memory_router",
    "Faults": ".memory_router",
    "open_memory_router": ".memory_router",
    "open_memory_swarm": ".crdt_network",
    "open_dht_swarm": ".dht_swarm",
    "LocalGroup": ".diloco_group",
    "InProcessExchange": ".diloco_group",
    "StreamingGroup": ".streaming_group",
    "Attacker": ".attacks",
    "through_stages": ".pipelines",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)


__all__ = ["wait_until", "wait_until_sync", *_LAZY]
