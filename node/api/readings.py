"""What the web service and the metrics read of a running node: its status and the statistics
of four services. The Daemon has them; api/ states that it reads no more (a Protocol, not the
Daemon: tests/node/test_service_consumers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..daemon import DaemonStatus
    from ..net.penalties import PeerScoreboard
    from ..services.gossip import Gossip
    from ..services.tensors import TensorStore
    from ..supervision import Supervisor


class NodeReadings(Protocol):
    @property
    def gossip(self) -> Gossip: ...

    @property
    def scoreboard(self) -> PeerScoreboard: ...

    @property
    def tensor_store(self) -> TensorStore: ...

    @property
    def supervisor(self) -> Supervisor: ...

    def status(self) -> DaemonStatus: ...
