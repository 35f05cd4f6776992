"""The simulated Internet under the scale simulation: one event heap on trio's clock, links that
cost time (sim_links.py: latency, up/down rates, loss as retransmission delay), and counters.

Time is trio's: under `trio.testing.MockClock(autojump_threshold=0)` the clock jumps to the next
delivery whenever every task waits, so a simulated minute costs only the CPU of the code that
runs in it. Every message leaves through its sender's uplink and enters through the receiver's
downlink, each a FIFO at that node's rate, and keeps its stream's order (TCP). One heap and one
task deliver everything, a tick (1 ms) at a time: a task or a timer per message would cost
more than the messages.

`LookupTrace` counts the requests and hops of one lookup from outside the DHT: the simulated
host reads which peers each traced answer names (sim_host.py).
"""

from __future__ import annotations

import contextvars
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from .sim_links import Access, lost, retransmit_delay, wire_bytes
from .timeline import Timeline

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see dht/node.py)

# Deliveries due within one tick go out together: the loop wakes once per tick, not once per
# message (at 10k nodes, thousands of messages land every simulated second). A millisecond is
# nothing next to Internet round trips of 30-300 ms.
TICK = 0.001


@dataclass(slots=True)
class Traffic:
    messages: int = 0
    bytes: int = 0

    def copy(self) -> Traffic:
        return Traffic(self.messages, self.bytes)


class LookupTrace:
    """Requests, bytes and hops of the lookup that set it (`TRACE`), as its tasks send them.

    A peer asked from the node's own table is one hop away; a peer first named in the answer of
    a peer h hops away is h + 1 hops away. `last_depth` is the hop count of the peer that
    answered last: for a get, the replica whose answer ended the walk."""

    __slots__ = ("requests", "bytes", "depth", "last_depth", "deepest")

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.depth: dict[bytes, int] = {}  # peer ID bytes → hops
        self.last_depth = 0
        self.deepest = 0

    def sent(self, nbytes: int) -> None:
        self.requests += 1
        self.bytes += nbytes

    def answered(self, peer: bytes, named: Iterable[bytes]) -> None:
        hops = self.depth.setdefault(peer, 1)
        self.last_depth = hops
        self.deepest = max(self.deepest, hops)
        for other in named:
            self.depth.setdefault(other, hops + 1)


TRACE: contextvars.ContextVar[LookupTrace | None] = contextvars.ContextVar("TRACE", default=None)


class SimNet:
    """Delivery at simulated times, through the links of `Access` records; run it in a nursery."""

    def __init__(self, *, seed: int = 0, loss: bool = True) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        self.traffic = Traffic()  # every message sent, all nodes together
        self.per_node: dict[int, Traffic] = {}  # node index → what it sent
        self._timeline = Timeline(yield_each=False)

    @property
    def delivered(self) -> int:
        return self._timeline.calls

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._timeline.run(task_status=task_status)

    def at(self, when: float, deliver: Callable[..., None], *args: Any) -> None:
        """Call `deliver(*args)` at simulated time `when`, rounded up to the next `TICK`
        (synchronously, from `run`)."""
        self._timeline.at(math.ceil(when / TICK) * TICK, deliver, *args)

    def transmit(self, src: int, a: Access, b: Access, rtt: float, nbytes: int) -> float:
        """Count a message of `nbytes` from a to b and return when its last byte arrives."""
        wire = wire_bytes(nbytes)
        self.count(src, wire)
        start = max(trio.current_time(), a.up_free)
        a.up_free = start + wire / a.up
        arrive = a.up_free + rtt / 2
        if self.loss and lost(self.rng, a, b, nbytes):
            arrive += retransmit_delay(rtt)
        arrive = max(arrive, b.down_free + wire / b.down)
        b.down_free = arrive
        return arrive

    def count(self, src: int, wire: int) -> None:
        self.traffic.messages += 1
        self.traffic.bytes += wire
        mine = self.per_node.get(src)
        if mine is None:
            mine = self.per_node[src] = Traffic()
        mine.messages += 1
        mine.bytes += wire

    def snapshot(self) -> tuple[Traffic, dict[int, Traffic]]:
        return self.traffic.copy(), {k: v.copy() for k, v in self.per_node.items()}
