"""A trainer in a SWARM run: its wiring kept in step with RunState, a static phase, the step loop.

The trainer is trainer.py's `PipelineTrainer` with whatever `StageTransport` it is given (the
node's libp2p one, node/runs/pipeline_transport.py, or the in-process one,
testing/pipeline_memory.py); this loop keeps its wiring told of the servers. Every half second
it reads the stage servers from RunState (membership.py) and:

- announces a server new to its stage (it enters at the stage's minimum virtual load);
- brings back a server it excluded after a failed call once that server has renewed its record
  since (a re-announcement: it is alive and serving again); a dead server never renews, so it
  stays out until its lease ends and it leaves the view;
- moves a server that now announces another stage (a rebalancing move) to that stage's wiring.

With `static_seconds` > 0 the run opens with a fixed pipeline (per stage the server announcing
the most throughput, lowest peer ID on ties; replaced by the next one only if it fails) for that
long: the baseline the report's `static_throughput` compares with, measured in the same
conditions as the SWARM phase after it. The trainer announces itself `pipeline-trainer/static`
meanwhile, and servers hold rebalancing until no trainer does.

Data: the digits training rows are dealt over `shards` by a seeded hash of this trainer's peer
ID, so trainers usually read different rows. Losses are training losses of the microbatches as
they complete (the last stage computes them); `initial_loss` / `final_loss` average the first and
the last `LOSS_WINDOW` of them.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Any

import trio

from ..data import seeded_int
from ..data.batches import Batches
from .membership import (
    STATIC_TRAINER_ROLE,
    TRAINER_ROLE,
    PipelinePeer,
    ServerEntry,
    servers,
)
from .run_spec import PipelineSpec
from .trainer import PipelineTrainer, TrainerConfig
from .transport import StageTransport
from .wiring import PipelineWiring

log = logging.getLogger(__name__)

SYNC_EVERY = 0.5
LEASE_MS = 10_000
ANNOUNCE_EVERY = 3.0
LOSS_WINDOW = 20
SHARDS = 4
STAGE_WAIT = 180.0  # a stage whose servers all restart is waited for (they resume from disk)


class WiringSync:
    """Keeps a `PipelineWiring` in step with the stage servers announced in RunState."""

    def __init__(self, wiring: PipelineWiring, num_stages: int) -> None:
        self.wiring, self.num_stages = wiring, num_stages
        self._seen: dict[str, ServerEntry] = {}

    def update(self, entries: dict[str, ServerEntry]) -> None:
        for peer, old in list(self._seen.items()):
            new = entries.get(peer)
            if new is None or new.stage != old.stage:
                self.wiring[old.stage].exclude(peer)
                del self._seen[peer]
        for peer, entry in entries.items():
            old = self._seen.get(peer)
            stage = self.wiring[entry.stage]
            if old is None or (peer not in stage.peers and entry.stamp != old.stamp):
                stage.announce(peer)
                self._seen[peer] = entry
            elif peer in stage.peers:
                self._seen[peer] = entry

    def complete(self) -> bool:
        return all(self.wiring[s].peers for s in range(self.num_stages))


class TrainerLoop:
    """This peer's trainer in one run. `await nursery.start(loop.run)`."""

    def __init__(self, spec: PipelineSpec, peer: PipelinePeer, *, transport: StageTransport):
        self.spec, self.me, self.state, self.writer = spec, peer.me, peer.state, peer.writer
        self.transport, self.addrs = transport, peer.addrs
        self.phase = "waiting for servers"
        self.losses: collections.deque[float] = collections.deque(maxlen=LOSS_WINDOW)
        self.first_losses: list[float] = []
        self.static: dict[str, float] | None = None
        self.swarm_started: float | None = None
        self.swarm_ended: float | None = None
        self.trainers: list[PipelineTrainer] = []
        self.finished = False

    async def run(
        self, *, task_status: trio.TaskStatus[TrainerLoop] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._announce_loop)
            task_status.started(self)
            await self._train()
            self.swarm_ended = time.monotonic()
            self.finished = True
            self.phase = "finished"

    async def _announce_loop(self) -> None:
        while True:
            self._announce()
            await trio.sleep(ANNOUNCE_EVERY)

    def _announce(self) -> None:
        role = STATIC_TRAINER_ROLE if self.phase == "static pipeline" else TRAINER_ROLE
        self.writer.announce(
            role=role,
            addrs=list(self.addrs())[:8],
            throughput=self._recent_throughput(),
            lease_ms=LEASE_MS,
        )

    def _entries(self) -> dict[str, ServerEntry]:
        return servers(self.state, self.spec.stages)

    async def _train(self) -> None:
        """Wiring complete, then the static phase (if any), then the SWARM phase."""
        spec = self.spec
        seed = seeded_int("pipeline-trainer", spec.seed, self.me)
        sync = WiringSync(PipelineWiring(spec.stages, seed=seed % 1_000_003), spec.stages)
        while True:
            sync.update(self._entries())
            if sync.complete():
                break
            await trio.sleep(SYNC_EVERY)
        data = await trio.to_thread.run_sync(lambda: spec.dataset_config().build())
        batches = data.train_batches(
            seed % SHARDS, SHARDS, batch_size=spec.batch_size, seed=spec.seed
        )
        config = TrainerConfig(
            in_flight=spec.in_flight, max_attempts=12, retry_delay=0.2, server_wait=STAGE_WAIT
        )
        step = 0
        if spec.static_seconds > 0:
            fixed = PipelineWiring(spec.stages, seed=seed % 1_000_003)
            step = await self._static_phase(self._trainer(fixed, config), fixed, batches)
        self.phase = "swarm"
        self._announce()
        trainer = self._trainer(sync.wiring, config)
        self.swarm_started = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sync_loop, sync)
            await self._steps(trainer, batches, step, until=None)
            nursery.cancel_scope.cancel()

    async def _static_phase(
        self, trainer: PipelineTrainer, fixed: PipelineWiring, batches: Batches
    ) -> int:
        """`static_seconds` through one fixed pipeline (the baseline); the next step index."""
        self.phase = "static pipeline"
        self._announce()  # servers hold rebalancing while we measure
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_fixed, fixed)
            step = await self._steps(trainer, batches, 0, until=started + self.spec.static_seconds)
            nursery.cancel_scope.cancel()
        elapsed = time.monotonic() - started
        samples = trainer.statistics().samples
        self.static = {"samples": samples, "seconds": elapsed, "throughput": samples / elapsed}
        return step

    async def _keep_fixed(self, fixed: PipelineWiring) -> None:
        """The static pipeline: one server per stage, the fastest; replaced only if it fails."""
        while True:
            best = self._fastest()
            for stage in range(self.spec.stages):
                if not fixed[stage].peers and stage in best:
                    fixed[stage].announce(best[stage])
            await trio.sleep(SYNC_EVERY)

    def _fastest(self) -> dict[int, str]:
        best: dict[int, tuple[float, str]] = {}
        for peer, entry in sorted(self._entries().items()):
            if entry.stage not in best or entry.throughput > best[entry.stage][0]:
                best[entry.stage] = (entry.throughput, peer)
        return {stage: peer for stage, (_, peer) in best.items()}

    def _trainer(self, wiring: PipelineWiring, config: TrainerConfig) -> PipelineTrainer:
        trainer = PipelineTrainer(
            num_stages=self.spec.stages, transport=self.transport, wiring=wiring, config=config
        )
        self.trainers.append(trainer)
        return trainer

    async def _steps(
        self, trainer: PipelineTrainer, batches: Batches, step: int, *, until: float | None
    ) -> int:
        """Microbatches `in_flight` at a time until `until` (monotonic) or the spec's count; the
        next step index. Microbatches in flight at `until` complete (none is abandoned)."""
        total = self.spec.microbatches
        limiter = trio.Semaphore(self.spec.in_flight)

        async def one(index: int) -> None:
            try:
                x, y = batches.batch(index)
                loss = await trainer.try_microbatch(x, y)
            finally:
                limiter.release()
            if loss is not None:
                self.losses.append(loss)
                if len(self.first_losses) < LOSS_WINDOW:
                    self.first_losses.append(loss)

        async with trio.open_nursery() as nursery:
            while (until is None or time.monotonic() < until) and (not total or step < total):
                with trio.move_on_at(
                    trio.current_time() + until - time.monotonic() if until else math.inf
                ):
                    await limiter.acquire()
                    nursery.start_soon(one, step)
                    step += 1
        return step

    async def _sync_loop(self, sync: WiringSync) -> None:
        while True:
            await trio.sleep(SYNC_EVERY)
            sync.update(self._entries())

    def _totals(self) -> dict[str, int]:
        stats = [t.statistics() for t in self.trainers]
        return {
            key: sum(getattr(s, key) for s in stats)
            for key in ("completed", "lost", "retries", "samples")
        }

    def _swarm_samples(self) -> int:
        return self.trainers[-1].statistics().samples if self.swarm_started and self.trainers else 0

    def _swarm_seconds(self) -> float:
        """Seconds of the SWARM phase so far (all of it, once finished)."""
        if not self.swarm_started:
            return 0.0
        return (self.swarm_ended or time.monotonic()) - self.swarm_started

    def _recent_throughput(self) -> float:
        if not self.swarm_started:
            return 0.0
        return self._swarm_samples() / max(1e-3, self._swarm_seconds())

    def status(self) -> dict[str, Any]:
        totals = (
            self._totals()
            if self.trainers
            else {"completed": 0, "lost": 0, "retries": 0, "samples": 0}
        )

        def mean(values):
            return sum(values) / len(values) if values else None

        return {
            "role": "trainer",
            "phase": self.phase,
            **{f"{k}" if k != "lost" else "lost_microbatches": v for k, v in totals.items()},
            "swarm_samples": self._swarm_samples(),
            "swarm_seconds": round(self._swarm_seconds(), 3),
            "throughput": round(self._recent_throughput(), 3),
            "static": self.static,
            "initial_loss": mean(self.first_losses),
            "loss": mean(list(self.losses)),
            "finished": self.finished,
        }
