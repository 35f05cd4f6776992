"""What the daemon hands to the parts above its services: its infrastructure, never the Daemon.

It lives in services/ because that is the lowest sub-layer where every field's type is defined
without an upward import (the host and identity come from net/, gossip, tensors and the DHT
from services/). It holds infrastructure only: how this node trains (device, precision, an
attack, its ranks) is node/runs/training_choices.py's `TrainingChoices`. A part that uses a few
of these fields takes those fields, not the bundle (tests/node/test_service_consumers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libp2p.abc import IHost

from ..net.budget import ResourceBudget
from ..net.identity import Identity
from ..net.penalties import PeerScoreboard
from .dht import DhtService
from .gossip import Gossip
from .tensors import TensorStore


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
    # the daemon's resource budget: downloads are admitted against its receive memory, and
    # checkpoints against its disk (node/net/budget.py); None: unbounded (tests, tools)
    budget: ResourceBudget | None = None

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id.to_base58()
