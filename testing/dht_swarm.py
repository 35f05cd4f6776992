"""Many DHT nodes in one trio process, on real libp2p hosts over loopback (tests, benchmarks).

    async with open_dht_swarm(32, make_host) as swarm:   # make_host: e.g. node.host.build_host
        await swarm.join_all()                           # each bootstraps from an earlier node
        await swarm.nodes[3].put(...)
        await swarm.kill(5)                              # closes its host: peers see it vanish

The host factory is a parameter so a test can run the DHT on any host; `dht_host(rng)` is the
node's own host, its identity drawn from a seeded `random.Random` so peer IDs (and so the XOR
geometry: who is nearest a key, who dies with its replicas) repeat run to run.
Each node runs under its own cancel scope, so a test can kill one without touching the rest.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import trio
import trio.lowlevel
from libp2p.abc import IHost
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.network.swarm import Swarm
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.dht.dialer import MAX_DIALS
from peertrain.dht.node import Dht, DhtConfig
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see dht/node.py)

LOOPBACK = "/ip4/127.0.0.1/tcp/0"
QUIET = DhtConfig(publish_peer_record=False)  # swarm tests publish peer records when they want


def without_auto_connect(host: IHost) -> IHost:
    """Stop py-libp2p's AutoConnector from dialling peerstore peers.

    It is on by default in 0.8.1 and aims at (low + high watermark) / 2 connections: zero
    watermarks alone left it aiming at 32, so 30 s into a swarm of tens of nodes in one process
    every node dialled up to 32 peers it once met, and that CPU swamped what a test measures.
    """
    network = cast(Swarm, host.get_network())
    config = network.connection_config  # what new_host builds
    config.min_connections = 0
    config.low_watermark = 0

    async def never() -> None:
        return None

    network.auto_connector.maybe_connect = never  # type: ignore[method-assign]
    return host


def dht_host(rng: random.Random | None = None) -> IHost:
    """The node's host without auto-connect; its key from `rng` when given (else random)."""
    identity = (
        Identity.from_key_pair(create_new_key_pair(rng.randbytes(32)))
        if rng is not None
        else Identity.generate()
    )
    return without_auto_connect(build_host(identity))


@dataclass
class DhtSwarm:
    nodes: list[Dht]
    scopes: list[trio.CancelScope]
    alive: list[bool] = field(default_factory=list)
    seed: int = 0

    def info(self, index: int) -> PeerInfo:
        host = self.nodes[index].host
        return PeerInfo(
            host.get_id(), [Multiaddr(str(a).split("/p2p/")[0]) for a in host.get_addrs()]
        )

    def live(self) -> list[Dht]:
        return [node for node, up in zip(self.nodes, self.alive, strict=True) if up]

    async def join_all(self, *, how: str = "random", indices: Sequence[int] | None = None) -> None:
        """Bootstrap every node (but the first) concurrently from one earlier node.

        `how="first"` joins everyone through node 0; `"random"` through a random earlier node.
        """
        rng = random.Random(self.seed)
        chosen = list(indices) if indices is not None else list(range(1, len(self.nodes)))
        async with trio.open_nursery() as nursery:
            for index in chosen:
                via = 0 if how == "first" or index == 0 else rng.randrange(index)
                nursery.start_soon(self.nodes[index].bootstrap, [self.info(via)])

    async def kill(self, index: int) -> None:
        """Stop node `index`: its DHT and host shut down and its connections close."""
        self.alive[index] = False
        self.scopes[index].cancel()
        await trio.lowlevel.checkpoint()


async def _run_node(
    dht: Dht,
    scope: trio.CancelScope,
    *,
    task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with scope:
        async with dht.host.run([Multiaddr(LOOPBACK)]), trio.open_nursery() as nursery:
            await nursery.start(dht.run)
            task_status.started()
            await trio.sleep_forever()


@contextlib.asynccontextmanager
async def open_dht_swarm(
    n: int,
    make_host: Callable[[], IHost],
    *,
    config: DhtConfig | Callable[[int], DhtConfig] = QUIET,
    seed: int = 0,
    **dht_kwargs: Any,
) -> AsyncIterator[DhtSwarm]:
    """N listening DHT nodes, not yet joined (call `join_all`).

    The nodes share one CPU, so they share the dial slots a node has for its own
    (`dht.dialer.MAX_DIALS`), unless `dial_slots` says otherwise.
    """
    dht_kwargs.setdefault("dial_slots", trio.CapacityLimiter(MAX_DIALS))
    async with trio.open_nursery() as nursery:
        swarm = DhtSwarm(nodes=[], scopes=[], seed=seed)
        for index in range(n):
            node_config = config(index) if callable(config) else config
            dht = Dht(make_host(), node_config, **dht_kwargs)
            scope = trio.CancelScope()
            await nursery.start(_run_node, dht, scope)
            swarm.nodes.append(dht)
            swarm.scopes.append(scope)
            swarm.alive.append(True)
        try:
            yield swarm
        finally:
            nursery.cancel_scope.cancel()
