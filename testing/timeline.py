"""Calls at given times on trio's clock, made by one task: the delivery loop under the memory
router (memory_router.py) and under the scale simulation's network (sim_net.py).

One heap and one task rather than a task or a timer per message: cheaper, and calls due at the
same time keep the order they were scheduled in. Under trio's MockClock with autojump the clock
jumps to the next call whenever every task waits.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see crdt/replicator.py)


class Timeline:
    """`at(when, call, *args)` schedules; `run()` (in a nursery) makes the calls when due.

    `yield_each`: let other tasks run after every call (a receiver drains its bounded inbox
    between two deliveries, as on a real network); without it, every call due at one instant is
    made before yielding (the simulation's thousands of nodes make that the cheaper loop).
    """

    def __init__(self, *, yield_each: bool = True) -> None:
        self.yield_each = yield_each
        self.calls = 0  # made so far
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self._wake = trio.Event()

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, when: float, call: Callable[..., None], *args: Any) -> None:
        """Call `call(*args)` at trio time `when` (synchronously, from `run`)."""
        heapq.heappush(self._heap, (when, next(self._order), call, args))
        if self._heap[0][0] == when:
            self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        heap = self._heap
        while True:
            if not heap:
                await self._wait(None)
                continue
            wait = heap[0][0] - trio.current_time()
            if wait > 0:
                await self._wait(wait)
                continue
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                _, _, call, args = heapq.heappop(heap)
                call(*args)
                self.calls += 1
                if self.yield_each:
                    break
            await trio.lowlevel.checkpoint()

    async def _wait(self, seconds: float | None) -> None:
        """Until a call is scheduled ahead of the first one, or `seconds` pass."""
        with trio.move_on_after(float("inf") if seconds is None else seconds):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = trio.Event()
