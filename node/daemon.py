"""The daemon: one trio nursery of services, started in order, each announcing when it serves.

    host (TCP + Noise + Yamux, listening)
      └─ nursery
           ├─ PeerKeeper      bootstrap peers, reconnecting with backoff
           ├─ DhtService      Kademlia DHT: records, bootstrap, bare peer IDs (node/services/dht.py)
           ├─ PeerExchange    learn peers' peers until the node is well connected
           ├─ Gossip          gossipsub, tuned and fenced (node/services/gossip.py)
           ├─ TensorService   content-addressed tensors for peers (state, updates)
           ├─ Reachability    serves dial-backs, asks peers to dial us (node/nat/reachability.py)
           ├─ NatTraversal    relay hop when public; reservations, DCUtR, UPnP when not
           └─ RunManager      runs this node creates or joins (one RunSession each)

The control socket is not started here: node/api/serve.py runs a daemon with it (api/ sits
above the daemon in the layer order). Every inbound stream passes one shield
(node/net/inbound_shield.py) and bans disconnect (node/net/bans.py): a misbehaving remote peer
never stops the node. Torch is not imported here: the training services import it when a run
needs it. What sits above the services (runs, their control methods) is handed `NodeServices`
(node/services/node_services.py), never the daemon: the sub-layers import only downwards.
"""

from __future__ import annotations

import logging
import os
import time
from importlib import metadata
from typing import Any, TypedDict

import trio
from libp2p.peer.id import ID
from multiaddr import Multiaddr
from peertrain.swarm.budget import RunBudget

from .config import NodeConfig
from .nat.reachability import ReachabilityCheck
from .nat.relays import HopLimits
from .nat.traversal import NatTraversal
from .net.addresses import rank
from .net.bans import BanEnforcer
from .net.budget import BudgetLimits, BudgetUsage, ConnectionGate, ResourceBudget
from .net.host import build_host, parse_peer_addr
from .net.identity import Identity
from .net.inbound_shield import InboundShield, ShieldStatistics
from .net.latency import PeerLatency
from .net.loaded_code import freeze_what_is_loaded
from .net.names import friendly_name
from .net.peers import IdentityGuard, PeerKeeper
from .net.penalties import PeerScoreboard
from .runs.manager import RunManager
from .runs.status import ManyRunsStatus, RunStatus
from .runs.training_choices import TrainingChoices
from .services.dht import DhtService, DhtServiceStatus
from .services.gossip import Gossip
from .services.node_services import NodeServices
from .services.peer_exchange import PeerExchange
from .services.tensors import TensorService, TensorStore
from .supervision import ServiceHealthStatus, Supervisor

log = logging.getLogger(__name__)


class DaemonStatus(TypedDict):
    """`peertrain status --json`: what node/cli/status_text.py and the tests read."""

    peer_id: str
    name: str
    public_name: str  # the owner's --name for this node; "" when none
    addrs: list[str]  # best first
    share: str | None  # the address to give other machines
    peers: list[str]
    peer_names: dict[str, str]
    peer_latency_ms: dict[str, float]  # smoothed ping round trips of connected peers that answer
    run: RunStatus | ManyRunsStatus | None
    dht: DhtServiceStatus
    reachability: dict[str, Any]  # Reachability.as_dict() and NatStatus, one dict
    # bootstrap peers we are not connected to → why their last dial failed (node/net/peers.py)
    bootstrap_failures: dict[str, str]
    private_network: bool
    uptime_s: float
    pid: int
    version: str
    home: str
    services: list[ServiceHealthStatus]  # each supervised service: state, restarts, last error
    budget: BudgetUsage  # the resource budget: usage beside each limit, refusals
    shield: ShieldStatistics  # inbound streams refused (banned), peer faults, handler bugs


def training_choices(config: NodeConfig, ranks: Any) -> TrainingChoices:
    """How this node trains in every run it joins, from its config (and its `--ranks` lease)."""
    return TrainingChoices(
        attack=config.attack,
        slowdown=config.slowdown,
        device=config.device,
        precision=config.precision,
        sample_grid_every=config.sample_grid_every,
        public_name=config.public_name,
        ranks=ranks,
    )


class Daemon:
    """A running node. `await nursery.start(daemon.run)` returns once it listens and serves."""

    def __init__(self, config: NodeConfig, identity: Identity, *, ranks: Any = None):
        """`ranks`: the RankLease of a node of several ranks (`--ranks N`), else None."""
        self.config = config
        self.identity = identity
        self.host = build_host(
            identity,
            psk=config.psk,
            announce=config.announce,
            dial_timeout=config.dial_timeout,
            uplink_mbit=config.uplink_mbit,
        )
        self.bootstrap = [parse_peer_addr(a) for a in config.bootstrap]
        self.started_at: float | None = None
        self._guard = IdentityGuard(self.host)
        self.scoreboard = PeerScoreboard()
        self.shield = InboundShield(
            self.host, is_banned=self.scoreboard.is_banned, penalise=self.scoreboard.penalise
        )
        self.shield.install()  # before anything can open a stream to us
        self.bans = BanEnforcer(self.host, self.scoreboard)
        self.supervisor = Supervisor()
        self.budget = ResourceBudget(BudgetLimits.of(config), home=config.home)
        self.connection_gate = ConnectionGate(self.host, self.budget)
        self.peer_exchange = PeerExchange(self.host, self.scoreboard)
        self.latency = PeerLatency(self.host)
        self.dht = DhtService(self.host, self.scoreboard, self.bootstrap, connect=self._connect)
        self.gossip = Gossip(
            self.host, self.scoreboard
        )  # before connections: pubsub hears of peers by event
        self.tensor_store = TensorStore()
        self.services = NodeServices(
            host=self.host,
            identity=identity,
            scoreboard=self.scoreboard,
            gossip=self.gossip,
            tensors=self.tensor_store,
            dht=self.dht,
            addrs=self.addrs,
            home=config.home,
            budget=self.budget,
        )
        self.runs = RunManager(
            self.services,
            training_choices(config, ranks),
            join_at_start=config.run,
            role_at_start=config.run_role,
            data_at_start=config.run_data,
            certificate_at_start=config.run_certificate,
            trusted_models=config.trusted_models,
            budget=RunBudget(max_params=config.max_params, max_memory=config.max_memory),
        )
        self.reachability = ReachabilityCheck(self.host, psk=config.psk, scoreboard=self.scoreboard)
        self.nat = self._nat_traversal()
        self.keeper = PeerKeeper(self.host, self.bootstrap, interval=config.reconnect_interval)

    def _nat_traversal(self) -> NatTraversal:
        """Relays (hop and client), hole punching and UPnP, publishing what we are reachable at."""
        config = self.config
        return NatTraversal(
            self.host,
            self.reachability,
            limits=HopLimits.of(config),
            budget=self.budget,
            relays=config.relays,
            prefer=[p.peer_id for p in self.bootstrap],
            upnp=config.upnp,
            publish=self._publish_addrs,
            dial_timeout=config.dial_timeout,
            dht_server=self.dht.serve,
        )

    async def _connect(self, peer: ID, addrs: list[Multiaddr]) -> str:
        """The DHT resolves and NAT traversal dials (circuits, hole punching). Each needs the
        other (traversal switches the DHT's mode), so one is handed a forward to the other."""
        return await self.nat.connect(peer, addrs)

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        listen = [Multiaddr(a) for a in self.config.listen]
        async with self.host.run(listen):
            self.host.get_network().register_notifee(self._guard)
            self.host.get_network().register_notifee(self.connection_gate)
            async with trio.open_nursery() as nursery:
                for name, service in self._services():
                    await self.supervisor.start(nursery, name, service, critical=True)
                self.started_at = time.monotonic()
                freeze_what_is_loaded()  # libp2p, trio and ours: out of the collector's passes
                log.info("node %s serving as %s", self.identity.name, self.identity.peer_id)
                task_status.started(self)

    def _services(self) -> list[tuple[str, Any]]:
        """The node's services in start order. Each runs under the supervisor: one that fails
        while serving is logged, shown under `services` in status, and restarted with backoff;
        one that cannot start at all stops the daemon's start (it would not be a node)."""
        tensors = TensorService(self.host, self.tensor_store, self.scoreboard)
        return [
            ("bans", self.bans.run),
            ("peer keeper", self.keeper.run),
            ("dht", self.dht.run),
            ("peer exchange", self.peer_exchange.run),
            ("latency", self.latency.run),
            ("gossip", self.gossip.run),
            ("tensors", tensors.run),
            ("reachability", self.reachability.run),
            ("nat traversal", self.nat.run),
            ("runs", self.runs.run),
        ]

    async def _publish_addrs(self, addrs: list[str]) -> None:
        """Circuits and dialed-back addresses go in our DHT peer record: identify would mangle
        the former and does not know the latter."""
        await self.dht.advertise(addrs)

    def addrs(self) -> list[str]:
        """Advertised addresses, best first: the first one is what to give other machines."""
        return [str(a) for a in sorted(self.host.get_addrs(), key=rank)]

    def status(self) -> DaemonStatus:
        peers = [p.to_base58() for p in self.reachability.peers()]
        peer_names = {p: friendly_name(p) for p in peers}
        addrs = self.addrs()
        return DaemonStatus(
            peer_id=self.identity.peer_id.to_base58(),
            name=self.identity.name,
            public_name=self.config.public_name,
            addrs=addrs,
            share=addrs[0] if addrs else None,
            peers=peers,
            peer_names=peer_names,
            peer_latency_ms={p: v for p, v in self.latency.status().items() if p in peer_names},
            run=self.runs.status(),
            dht=self.dht.status(),
            reachability={**self.reachability.current.as_dict(), **self.nat.status()},
            bootstrap_failures=self.keeper.failures(),
            private_network=self.config.psk is not None,
            uptime_s=round(time.monotonic() - self.started_at, 1) if self.started_at else 0.0,
            pid=os.getpid(),
            version=metadata.version("peertrain"),  # the installed distribution's
            home=str(self.config.home),
            services=self.supervisor.status(),
            budget=self.budget.usage(self.connection_gate.counts()),
            shield=self.shield.statistics(),
        )
