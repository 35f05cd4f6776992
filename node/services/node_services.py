"""What the daemon hands to the parts above its services: one frozen bundle, never the Daemon.

It lives in services/ because that is the lowest sub-layer where every field's type is defined
without an upward import (the host and identity come from net/, gossip, tensors and the DHT
from services/); runs/ and the control methods of services/ take it instead of reaching through
the daemon. Config enters as the few values a run needs, not as NodeConfig (the daemon's level).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from libp2p.abc import IHost

from ..net.budget import ResourceBudget
from ..net.identity import Identity
from ..net.penalties import PeerScoreboard
from .dht import DhtService
from .gossip import Gossip
from .tensors import TensorStore

if TYPE_CHECKING:  # at run time a node without --ranks never imports torch.distributed here
    from peertrain.swarm.diloco.member.intra_node import RankLease


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeServices:
    host: IHost
    identity: Identity
    scoreboard: PeerScoreboard  # penalise peers that send bad data; refuse banned ones
    gossip: Gossip
    tensors: TensorStore  # content-addressed tensors this node serves to peers
    dht: DhtService
    addrs: Callable[[], list[str]]  # advertised addresses, best first
    home: Path  # the node's data directory: runs keep manifests and checkpoints under it
    attack: str | None = None  # research/testing: a Byzantine behaviour for runs (swarm/attacks)
    slowdown: float = 1.0  # research/testing: a slower machine (streaming_loop.py)
    # where this node trains and in what precision: its own choice, never the run's
    # (swarm/devices.py: auto|cpu|cuda[:N]|mps; fp32|bf16|fp16)
    device: str = "auto"
    precision: str = "fp32"
    sample_grid_every: int = 5  # rounds between a diffusion member's sample grids; 0: none
    # the ranks of a multi-GPU node (`--ranks N`; diloco/member/intra_node.py), lent to one run
    ranks: RankLease | None = None
    # the daemon's resource budget: downloads are admitted against its receive memory, and
    # checkpoints against its disk (node/net/budget.py); None: unbounded (tests, tools)
    budget: ResourceBudget | None = None

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id.to_base58()
