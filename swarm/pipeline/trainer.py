"""A SWARM trainer: each microbatch takes its own randomized path through one server per stage.

Forward: stage 0 … S-2 `forward`, then the last stage's `loss_backward`; backward: stages S-2 … 0
`backward`, each sent to whichever server of the stage the wiring picks (servers recompute, so it
need not be the server that ran the forward). The trainer keeps every stage's input of a
microbatch in flight, so a failed call is simply re-sent to another server of the same stage: a
dying server costs a retry, not a microbatch. A microbatch is lost only when a stage has had no
live server for `server_wait` seconds or a call failed `max_attempts` times; lost microbatches
are counted, never hidden.

Many microbatches are in flight at once (`in_flight`), which is what keeps every server of every
stage busy; the wiring spreads them by measured throughput.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import trio
from peertrain.swarm.data.batches import Batches

from .boundary import BoundaryTensor, pack
from .errors import MicrobatchLost, NoServerAvailable, ServerUnavailable
from .transport import StageTransport
from .wiring import PeerKey, PipelineWiring

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerConfig:
    in_flight: int = 16  # microbatches in flight at once
    max_attempts: int = 8  # per call, across servers of the stage
    retry_delay: float = 0.01  # seconds before retrying when the stage has no live server
    # seconds a call waits for a stage with no live server (all restarting) before its tries
    # count: servers that come back resume the stage from their checkpoints
    server_wait: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerStatistics:
    completed: int
    lost: int
    retries: int
    samples: int


class PipelineTrainer:
    def __init__(
        self,
        *,
        num_stages: int,
        transport: StageTransport,
        wiring: PipelineWiring,
        config: TrainerConfig | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if num_stages < 2:
            raise ValueError("a pipeline has at least two stages")
        self.num_stages = num_stages
        self.transport = transport
        self.wiring = wiring
        self.config = config or TrainerConfig()
        self.clock = clock
        self._completed = self._lost = self._retries = self._samples = 0

    async def microbatch(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Run one microbatch forward and backward through the swarm; its loss."""
        rows = x.shape[0]
        inputs: list[BoundaryTensor] = [pack(x, "fp32")]
        for stage in range(self.num_stages - 1):
            inputs.append(
                await self._call(
                    stage,
                    rows,
                    False,
                    lambda peer, s=stage: self.transport.forward(peer, stage=s, x=inputs[s]),
                )
            )
        last = self.num_stages - 1
        loss, grad = await self._call(
            last,
            rows,
            True,
            lambda peer: self.transport.loss_backward(peer, stage=last, x=inputs[last], targets=y),
        )
        for stage in reversed(range(last)):
            assert grad is not None
            grad = await self._call(
                stage,
                rows,
                True,
                lambda peer, s=stage, g=grad: self.transport.backward(
                    peer, stage=s, x=inputs[s], grad_out=g
                ),
            )
        self._completed += 1
        self._samples += rows
        return loss

    async def try_microbatch(self, x: torch.Tensor, y: torch.Tensor) -> float | None:
        """`microbatch`, except that a lost one is counted and returns None."""
        try:
            return await self.microbatch(x, y)
        except MicrobatchLost:
            self._lost += 1
            return None

    async def train(self, batches: Batches, *, steps: int, start: int = 0) -> list[float | None]:
        """Microbatches `start` … `start+steps-1`, `in_flight` at a time; losses (None: lost)."""
        losses: list[float | None] = [None] * steps
        limiter = trio.Semaphore(self.config.in_flight)

        async def one(index: int) -> None:
            try:
                x, y = batches.batch(start + index)
                losses[index] = await self.try_microbatch(x, y)
            finally:
                limiter.release()

        async with trio.open_nursery() as nursery:
            for index in range(steps):
                await limiter.acquire()
                nursery.start_soon(one, index)
        return losses

    async def _call(
        self, stage: int, rows: int, backward: bool, send: Callable[[PeerKey], Awaitable[T]]
    ) -> T:
        wiring = self.wiring[stage]
        patience = trio.current_time() + self.config.server_wait
        attempts = 0
        while attempts < self.config.max_attempts:
            try:
                peer = wiring.choose(rows, backward=backward)
            except NoServerAvailable:
                attempts += trio.current_time() >= patience
                await trio.sleep(self.config.retry_delay)  # servers may re-announce meanwhile
                continue
            attempts += 1
            started = self.clock()
            try:
                result = await send(peer)
            except ServerUnavailable:
                wiring.exclude(peer)
                self._retries += 1
                continue
            wiring.record(peer, samples=rows, seconds=self.clock() - started, backward=backward)
            return result
        attempts = self.config.max_attempts
        raise MicrobatchLost(f"stage {stage}: no server answered in {attempts} attempts")

    def statistics(self) -> TrainerStatistics:
        return TrainerStatistics(
            completed=self._completed, lost=self._lost, retries=self._retries, samples=self._samples
        )
