"""Streaming DiLoCo with real overlap: inner steps in a worker thread, exchanges on trio.

    compute thread: train a step ─► fragment due? encode it ─► outbox (bounded: P)
                    step t+τ reached? ─► wait for its contributions ─► outer step, mix
    trio task:      outbox ─► await exchange(slot, payload) ─► landed (bounded: P)

The thread applies a fragment's outer step exactly τ inner steps after sending it, as the paper
does and as peertrain.testing.StreamingGroup simulates, so the model does not depend on network
timing: an exchange done within τ steps costs no compute time, a slower one makes the thread wait
(counted as idle). At most one exchange per fragment is in flight, so P bounds both queues.

Members of unequal speed (`run_timed`): a slot is due every `stride_seconds` of wall time rather
than every H/P steps, so each member takes as many inner steps as fit, and a slow volunteer's
smaller update arrives with everyone else's instead of holding the exchange to its deadline.
A daemon's driver (streaming_driver.py) runs one round at a time (`run_slots`).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import trio
from peertrain.swarm.diloco.errors import DiLoCoError, LoopHalted
from peertrain.swarm.diloco.member.streaming import FragmentReport, StreamingMember
from peertrain.swarm.exchange.codec import Payload
from peertrain.swarm.exchange.interface import Contribution

FragmentExchange = Callable[[int, Payload], Awaitable[Sequence[Contribution]]]
Boundary = TypeVar("Boundary")
POLL = 0.2  # seconds between the waiting thread's checks that the network side is still up


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopStatistics:
    steps: int
    exchanges: int
    compute_seconds: float  # inner steps, encoding and outer steps
    idle_seconds: float  # waiting for an exchange to land or for the outbox to take a payload
    late_seconds: float = 0.0  # of idle: waiting for a fragment's exchange past its τ steps
    send_seconds: float = 0.0  # of idle: waiting for the outbox (P exchanges queued)
    drain_seconds: float = 0.0  # of late: landing what was in flight when the run ended
    handoff_seconds: float = 0.0  # of idle: waiting for the driver to take a round's end
    boundary_seconds: float = 0.0  # neither: the driver's work at a round's end (eval, copies)

    @property
    def idle_fraction(self) -> float:
        total = self.compute_seconds + self.idle_seconds
        return self.idle_seconds / total if total else 0.0


class StreamingLoop:
    def __init__(
        self,
        member: StreamingMember,
        exchange: FragmentExchange,
        *,
        limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        """`exchange(slot, payload)`: every member's contributions for `slot`, own included."""
        self.member = member
        self.exchange = exchange
        self.limiter = limiter  # the member's one torch thread, when it has other torch work
        self.slowdown = 1.0  # research/testing: every inner step takes this many times as long
        size = len(member.fragments)
        self._outbox_send, self._outbox = trio.open_memory_channel[tuple[int, Payload]](size)
        self._landed: queue.Queue[tuple[int, Sequence[Contribution]]] = queue.Queue(size)
        self._arrived: dict[int, Sequence[Contribution]] = {}
        self._stopped = threading.Event()
        self.reports: list[FragmentReport] = []
        self._compute = self._idle = self._late = self._sent = self._drain = 0.0
        self._handoff = self._boundary = 0.0
        self._steps = 0
        self._halt = threading.Event()
        # the driver's work for the thread between two steps (the next round's data shard)
        self.between_steps: queue.Queue[Callable[[], None]] = queue.Queue(8)

    def statistics(self) -> LoopStatistics:
        return LoopStatistics(
            steps=self._steps,
            exchanges=len(self.reports),
            compute_seconds=self._compute,
            idle_seconds=self._idle,
            late_seconds=self._late,
            send_seconds=self._sent,
            drain_seconds=self._drain,
            handoff_seconds=self._handoff,
            boundary_seconds=self._boundary,
        )

    async def run(self, steps: int) -> LoopStatistics:
        """`steps` inner steps with every exchange due on the way, then land what is in flight."""
        return await self._run(self._compute_loop, steps)

    async def run_timed(self, slots: int, *, stride_seconds: float) -> LoopStatistics:
        """`slots` exchanges, one due every `stride_seconds` from now, as many inner steps
        between them as this member's speed allows; then land what is in flight."""
        return await self.run_slots(1, slots, stride_seconds=stride_seconds)

    async def run_slots(
        self,
        first: int,
        slots: int,
        *,
        stride_steps: int | None = None,
        stride_seconds: float | None = None,
    ) -> LoopStatistics:
        """Slots `first` … `first + slots − 1`, one due every `stride_steps` inner steps or
        every `stride_seconds` of wall time from now (a daemon's round: its slots need not
        start at inner step 0); then land what is in flight."""
        if (stride_steps is None) == (stride_seconds is None):
            raise ValueError("give stride_steps or stride_seconds")
        return await self._run(self._slots_loop, first, slots, stride_steps, stride_seconds)

    async def run_rounds(
        self,
        first: int,
        rounds: int,
        *,
        at_boundary: Callable[[int], Boundary],
        boundaries: trio.MemorySendChannel[Boundary],
        stride_steps: int | None = None,
        stride_seconds: float | None = None,
    ) -> LoopStatistics:
        """Rounds `first` … `first + rounds − 1` of P slots each, with no pause between them:
        a round ends when its last fragment lands, and `at_boundary(round)` runs then, in the
        thread, while nothing is in flight; what it returns goes to `boundaries` (the driver
        publishes and agrees on it while the next round computes). `halt()` ends it early."""
        if (stride_steps is None) == (stride_seconds is None):
            raise ValueError("give stride_steps or stride_seconds")
        self._halt.clear()
        loop = functools.partial(self._rounds_loop, at_boundary, boundaries)
        return await self._run(loop, first, rounds, stride_steps, stride_seconds)

    def halt(self) -> None:
        """Stop `run_rounds` at the thread's next step or wait; what is in flight is dropped
        (the driver repairs the member's state next)."""
        self._halt.set()

    async def _run(self, loop: Callable[..., None], *args: float | None) -> LoopStatistics:
        self._stopped.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._network)
            try:
                threads = torch.get_num_threads()  # ours, on the event loop's thread
                work = functools.partial(self._in_thread, loop, threads=threads)
                await trio.to_thread.run_sync(work, *args, limiter=self.limiter)
            finally:
                self._stopped.set()
                nursery.cancel_scope.cancel()
        if self._halt.is_set():
            self._forget_in_flight()
        return self.statistics()

    def _forget_in_flight(self) -> None:
        """After a halt: no queued payload or landed result may reach the next run."""
        while True:
            try:
                self._outbox.receive_nowait()
            except trio.WouldBlock:
                break
        while not self._landed.empty():
            self._landed.get_nowait()
        self._arrived.clear()

    @staticmethod
    def _in_thread(loop: Callable[..., None], *args: float | None, threads: int) -> None:
        """`loop` with the torch threads of whoever started it: a pooled worker thread keeps
        the OpenMP thread count it first had, and a sum over 2 threads is not one over 1 bit
        for bit (runs must give what a member in one thread gives)."""
        torch.set_num_threads(threads)
        try:
            loop(*args)
        except LoopHalted:
            pass

    async def _network(self) -> None:
        try:
            async for slot, payload in self._outbox:
                contributions = await self.exchange(slot, payload)
                self._landed.put_nowait((slot, contributions))  # ≤ P in flight: never full
        finally:
            self._stopped.set()  # a waiting compute thread must not wait for nothing

    def _compute_loop(self, steps: int) -> None:
        member = self.member
        lands: dict[int, int] = {}  # slot in flight → the inner step after which it lands
        end = member.inner.step + steps
        while member.inner.step < end:
            self._step()
            slot = member.due()
            if slot is not None:
                self._sync(slot, lands)
            self._land(lands, member.inner.step)
        self._land(lands, None)

    def _slots_loop(
        self, first: int, slots: int, stride_steps: int | None, stride_seconds: float | None
    ) -> None:
        lands: dict[int, int] = {}
        start, start_step = time.monotonic(), self.member.inner.step
        k = 1
        while k <= slots:
            self._step()
            if stride_steps is not None:
                due = self.member.inner.step - start_step >= k * stride_steps
            else:
                due = time.monotonic() >= start + k * (stride_seconds or 0.0)
            if due:
                self._sync(first + k - 1, lands)
                k += 1
            self._land(lands, self.member.inner.step)
        self._land(lands, None)

    def _rounds_loop(
        self,
        at_boundary: Callable[[int], Boundary],
        boundaries: trio.MemorySendChannel[Boundary],
        first: int,
        rounds: int,
        stride_steps: int | None,
        stride_seconds: float | None,
    ) -> None:
        """Slot k of round r is due after (r − first)·P + k strides. A round ends when its
        last fragment lands (τ steps after it was sent), or, if that one is later, just
        before the next round's first slot is sent: never with anything in flight."""
        fragments, lands = len(self.member.fragments), {}
        start, start_step = time.monotonic(), self.member.inner.step
        ending = None  # the round whose last slot is sent and whose end is not taken yet
        for n in range(1, rounds * fragments + 1):
            while True:
                self._step()
                if stride_steps is not None:
                    if self.member.inner.step - start_step >= n * stride_steps:
                        break
                elif time.monotonic() >= start + n * (stride_seconds or 0.0):
                    break
                ending = self._land_or_end(lands, ending, at_boundary, boundaries)
            if ending is not None:
                self._round_end(lands, ending, at_boundary, boundaries)
            round_, k = divmod(n - 1, fragments)
            self._sync((first + round_) * fragments + k + 1, lands)
            ending = first + round_ if k == fragments - 1 else None
            ending = self._land_or_end(lands, ending, at_boundary, boundaries)
        if ending is not None:
            self._round_end(lands, ending, at_boundary, boundaries)

    def _land_or_end(
        self,
        lands: dict[int, int],
        ending: int | None,
        at_boundary: Callable[[int], Boundary],
        boundaries: trio.MemorySendChannel[Boundary],
    ) -> int | None:
        """Land what is due; the round `ending` ends once nothing is in flight (None then)."""
        self._land(lands, self.member.inner.step)
        if ending is None or lands:
            return ending
        self._round_end(lands, ending, at_boundary, boundaries)
        return None

    def _round_end(
        self,
        lands: dict[int, int],
        round_: int,
        at_boundary: Callable[[int], Boundary],
        boundaries: trio.MemorySendChannel[Boundary],
    ) -> None:
        """Land what is still in flight, take the round's end, hand it to the driver."""
        self._land(lands, None)
        started = time.perf_counter()
        item = at_boundary(round_)
        handoff = time.perf_counter()
        self._boundary += handoff - started
        trio.from_thread.run(boundaries.send, item)
        waited = time.perf_counter() - handoff
        self._idle += waited
        self._handoff += waited

    def _step(self) -> None:
        if self._halt.is_set():
            raise LoopHalted
        while not self.between_steps.empty():
            self.between_steps.get_nowait()()
        started = time.perf_counter()
        self.member.train(1)
        if self.slowdown > 1:  # a slower machine, for tests: each step takes `slowdown` times
            time.sleep((self.slowdown - 1) * (time.perf_counter() - started))
        self._steps += 1
        self._compute += time.perf_counter() - started

    def _sync(self, slot: int, lands: dict[int, int]) -> None:
        """Encode the slot's fragment, hand it to the network, note when it lands."""
        started = time.perf_counter()
        payload = self.member.prepare_fragment(slot)
        self._compute += time.perf_counter() - started
        self._send(slot, payload)
        lands[slot] = self.member.inner.step + self.member.config.overlap

    def _send(self, slot: int, payload: Payload) -> None:
        started = time.perf_counter()
        trio.from_thread.run(self._outbox_send.send, (slot, payload))
        waited = time.perf_counter() - started
        self._idle += waited
        self._sent += waited

    def _land(self, lands: dict[int, int], step: int | None) -> None:
        """Apply every fragment whose landing step is `step` or earlier (None: all of them)."""
        for slot in sorted(s for s, at in lands.items() if step is None or at <= step):
            late = self._late
            contributions = self._wait(slot)
            if step is None:
                self._drain += self._late - late
            started = time.perf_counter()
            self.reports.append(self.member.apply_fragment(slot, contributions))
            self._compute += time.perf_counter() - started
            del lands[slot]

    def _wait(self, slot: int) -> Sequence[Contribution]:
        started = time.perf_counter()
        while slot not in self._arrived:
            try:
                got, contributions = self._landed.get(timeout=POLL)
            except queue.Empty:
                if self._halt.is_set():
                    raise LoopHalted from None
                if self._stopped.is_set():
                    raise DiLoCoError(
                        f"the exchange of slot {slot} ended without a result"
                    ) from None
                continue
            self._arrived[got] = contributions
        waited = time.perf_counter() - started
        self._idle += waited
        self._late += waited
        return self._arrived.pop(slot)
