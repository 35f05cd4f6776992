"""A stage server in a SWARM run: what it decides, written against a transport and RunState.

What it does, each piece from this package:

- **serve** forward / backward / loss_backward (`StageServer`, recompute-on-backward, so any
  server of a stage may take any microbatch's backward), one call at a time in arrival order,
  torch in a worker thread. With `base_seconds` > 0 every call is padded to
  `base_seconds · work / speed` (testing: heterogeneous servers on one machine);
- **measure** its own throughput (bias-corrected EMA of forward-equivalent samples per second of
  service time, queueing excluded) and **announce** (stage, throughput) in RunState every few
  seconds with a short lease;
- **average** within the stage and step (`StageAverager`: numbered rounds, all-gather of
  sample-weighted gradient sums among the stage's live servers), and **repair drift**: a copy
  whose state checksum loses to the stage's majority re-syncs from a winner (`resyncs`);
- **checkpoint** its stage every `checkpoint_every` rounds, and start a stage nobody serves
  from its own newest checkpoint of it rather than the seed (stage_checkpointing.py);
- **rebalance** (stage_moves.py): every `rebalance_period` one deterministic move, decided on a
  settled view; a joiner takes the stage with the most need, the same way.

Who calls it does not matter here: the node's libp2p stream handler (node/runs/
pipeline_transport.py) and the in-process network (testing/pipeline_memory.py) call the same
`forward`, `backward`, `loss_backward`, `contribution` and `export_state`, and hand it a
`StagePeerTransport` to reach the stage's other servers. A call for a stage it does not serve
raises `WrongStage`; bad input from the caller raises `DecodeError` (the caller is to blame).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
import trio

from .averaging import StageAverager, StageContribution, StageState
from .boundary import BoundaryTensor, pack
from .checkpoint import StageCheckpoints
from .errors import NotServing, ServerUnavailable, WrongStage
from .membership import PipelinePeer, server_role, servers
from .migration import import_state
from .run_spec import PipelineSpec
from .slices import stage_slice
from .stage import StageServer
from .stage_checkpointing import StageCheckpointing
from .stage_moves import StageMoves
from .transport import StagePeerTransport
from .wiring import BACKWARD_COST, ThroughputEMA

log = logging.getLogger(__name__)

LEASE_MS = 10_000
ANNOUNCE_EVERY = 3.0
DONORS_TRIED = 3  # servers of a stage asked in turn for its state when we start serving it


class StageService(StageMoves, StageCheckpointing):
    """This peer's stage server in one run. `await nursery.start(service.run)`.

    `creator`: the run creator's peer ID (a joiner waits for a first claim before choosing)."""

    def __init__(
        self,
        spec: PipelineSpec,
        peer: PipelinePeer,
        *,
        peers: StagePeerTransport,
        creator: str,
        speed: float = 1.0,
        stage: int | None = None,
        checkpoints: StageCheckpoints | None = None,
        blame: Callable[[str, str], None] = lambda peer, why: None,
    ) -> None:
        if speed <= 0:
            raise ValueError("a server's speed must be positive")
        self.spec, self.me, self.state, self.writer = spec, peer.me, peer.state, peer.writer
        self.peers, self.creator, self.speed, self.addrs = peers, creator, speed, peer.addrs
        self.stage = -1  # none until `run` has chosen one and fetched its state
        self._wanted = stage
        self.server: StageServer | None = None
        self.averager: StageAverager | None = None
        self._ema = ThroughputEMA(beta=0.9)
        self._serve = trio.Lock()  # one call at a time, FIFO
        self._thread = trio.CapacityLimiter(1)
        self._nursery: trio.Nursery | None = None
        self.moves: list[dict[str, Any]] = []
        self.calls = self.refused = 0
        self.moving = False  # building or downloading a stage: drift repairs wait
        self.blame = blame  # a peer served a lie or a poison (the daemon penalises it)
        self._past_resyncs = 0  # of the averagers of stages we served before
        StageCheckpointing.__init__(self, checkpoints)

    # --- lifecycle -------------------------------------------------------------------------
    async def run(
        self, *, task_status: trio.TaskStatus[StageService] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                stage = self._wanted if self._wanted is not None else await self.choose_stage()
                await self.become(stage)
                nursery.start_soon(self._announce_loop)
                if self.spec.rebalance_period > 0:
                    nursery.start_soon(self.rebalance_loop, self.spec.rebalance_period)
                task_status.started(self)
        finally:
            self._nursery = None  # a call finishing after we stopped starts no round

    def _build(self, stage: int) -> StageServer:
        """A fresh server of `stage` from the run's config and seed (sync: call in a thread)."""
        spec = self.spec
        module = stage_slice(spec.model_config(), spec.stages, stage, seed=spec.seed)
        return StageServer(
            module,
            stage=stage,
            is_last=stage == spec.stages - 1,
            codec=spec.codec,
            optimizer=lambda params: torch.optim.Adam(params, lr=spec.lr),
        )

    async def become(self, stage: int, *, period: int | None = None) -> None:
        """Serve `stage` with its current state, downloaded from one of its servers if any."""
        self.moving = True
        try:
            await self._switch(stage, decided=time.time(), period=period)
        finally:
            self.moving = False

    async def _switch(self, stage: int, *, decided: float, period: int | None) -> None:
        server = await trio.to_thread.run_sync(self._build, stage, limiter=self._thread)
        async with self._serve:  # the call in progress finishes first; none starts meanwhile
            completed = await self._download(stage, server)
            old = self.stage
            if self.averager is not None:
                self._past_resyncs += self.averager.drift.resyncs
            self.server, self.stage = server, stage
            self.averager = self._averager(server, stage, completed)
            self._ema = ThroughputEMA(beta=0.9)
            await self._measure_once(server)
        self.announce()
        if old >= 0:
            move = {"at": decided, "from": old, "to": stage, "period": period}
            self.moves = [*self.moves[-63:], move]
        log.info("%s serves stage %d (round %d)", self.me[:12], stage, completed)

    async def _download(self, stage: int, server: StageServer) -> int:
        """Load `stage`'s state into `server` from one of its servers, or else from our own
        newest checkpoint of it; the round it is after (0: the seeded initial state)."""
        for donor in self.peers_in(stage)[:DONORS_TRIED]:
            try:
                flat, adam_step, completed = await self.peers.state(donor, stage=stage)
                await trio.to_thread.run_sync(
                    import_state, server, flat, adam_step, limiter=self._thread
                )
                self.resumed = {"from": "peer", "round": completed}
                return completed
            except (ServerUnavailable, ValueError) as exc:  # gone, moved, or a misfit state
                log.info("stage %d state from %s failed: %s", stage, donor, exc)
        return await self._resume_from_disk(stage, server)

    def _averager(self, server: StageServer, stage: int, completed: int) -> StageAverager:
        """The averager of this server in `stage`; every call it makes asks for that stage (a
        round still running when the server moves asks the right servers)."""
        peers = self.peers
        return StageAverager(
            server,
            me=self.me,
            fetch=lambda peer, round_: peers.contribution(peer, stage=stage, round_=round_),
            peers=lambda: self.peers_in(stage),
            completed=completed,
            fetch_state=lambda peer: peers.state(peer, stage=stage),
            may_repair=lambda: not self.moving and self.stage == stage,
            max_samples=self.spec.target_batch,  # a claim beyond the run's batch counts as that
            applied=lambda round_: self._round_applied(stage, round_),
            trusted=self._trusted,
            blame=self.blame,
        )

    def _trusted(self) -> frozenset[str]:
        """The run's trusted signers, whose copies decide a drift where they serve (drift.py):
        its anchors, the creator at least (a vote of self-declared servers is no proof)."""
        admission = self.state.admission
        return admission.trusted_attesters() if admission is not None else frozenset({self.creator})

    async def _measure_once(self, server: StageServer, calls: int = 3) -> None:
        """A first throughput figure before any trainer calls: a few forwards of one microbatch of
        random inputs, timed (and padded) as served calls are. Announced at once, so wiring,
        rebalancing and the static baseline's choice of the fastest server start from a
        measurement instead of a guess. Forwards keep nothing, so the stage's state is untouched.
        A first, untimed forward warms the fresh module up: timed, its allocations weighed a
        third of the figure and made a mover look several times slower than it is, which drew
        another mover to its stage."""
        x = pack(server.module.example_input(self.spec.batch_size))
        await trio.to_thread.run_sync(server.forward, x, limiter=self._thread)
        for _ in range(calls):
            started = trio.current_time()
            await trio.to_thread.run_sync(server.forward, x, limiter=self._thread)
            await self._pad(started, x.rows)
            self._ema.update((trio.current_time() - started) / x.rows)

    async def _pad(self, started: float, work: float) -> None:
        """Testing knob: stretch a call to `base_seconds · work / speed` (a slower machine)."""
        if self.spec.base_seconds > 0:
            target = self.spec.base_seconds * work / self.speed
            await trio.sleep(max(0.0, target - (trio.current_time() - started)))

    # --- announcements -----------------------------------------------------------------------
    def throughput(self) -> float:
        seconds = self._ema.value
        return 0.0 if not seconds else 1.0 / max(seconds, 1e-9)

    def announce(self) -> None:
        self.writer.announce(
            role=server_role(self.stage),
            addrs=list(self.addrs())[:8],
            throughput=self.throughput(),
            lease_ms=LEASE_MS,
        )

    async def _announce_loop(self) -> None:
        while True:
            await trio.sleep(ANNOUNCE_EVERY)
            self.announce()

    def peers_in(self, stage: int) -> list[str]:
        """The other live servers of `stage`, as RunState tells us now."""
        entries = servers(self.state, self.spec.stages)
        return sorted(p for p, e in entries.items() if e.stage == stage and p != self.me)

    # --- serving ---------------------------------------------------------------------------
    def check_stage(self, stage: int) -> None:
        """WrongStage unless we serve `stage` now (checked before a call waits for its turn)."""
        if stage != self.stage:
            raise WrongStage(f"this server serves stage {self.stage}, not {stage}")

    async def forward(self, stage: int, x: BoundaryTensor) -> BoundaryTensor:
        return await self._call(stage, x.rows, lambda server: server.forward(x))

    async def backward(
        self, stage: int, x: BoundaryTensor, grad_out: BoundaryTensor
    ) -> BoundaryTensor | None:
        work = BACKWARD_COST * x.rows
        grad = await self._call(stage, work, lambda server: server.backward(x, grad_out))
        await self._maybe_average()
        return grad

    async def loss_backward(
        self, stage: int, x: BoundaryTensor, targets: torch.Tensor
    ) -> tuple[float, BoundaryTensor | None]:
        work = BACKWARD_COST * x.rows
        result = await self._call(stage, work, lambda server: server.loss_backward(x, targets))
        await self._maybe_average()
        return result

    async def _call(self, stage: int, work: float, compute: Callable[[StageServer], Any]) -> Any:
        """One served call: in arrival order, in a worker thread, padded, measured."""
        self.check_stage(stage)
        async with self._serve:
            server = self.server
            if stage != self.stage or server is None:  # moved while the call waited
                raise WrongStage(f"this server now serves stage {self.stage}", moved=True)
            started = trio.current_time()
            result = await trio.to_thread.run_sync(compute, server, limiter=self._thread)
            await self._pad(started, work)
            self._ema.update((trio.current_time() - started) / work)
            self.calls += 1
            return result

    async def _maybe_average(self) -> None:
        """Start the stage's next round once our pending samples reach our share of it."""
        if self.averager is not None and self._nursery is not None:
            share = -(-self.spec.target_batch // (1 + len(self.peers_in(self.stage))))
            await self.averager.maybe_start(self._nursery, share)

    async def contribution(self, asker: str, stage: int, round_: int) -> StageContribution | None:
        """Our contribution to round `round_` for `asker` (a server of our stage); starts that
        round if it is our next. None: a round we no longer keep, or one too far ahead."""
        self.check_stage(stage)
        if self.averager is None or self._nursery is None:
            raise NotServing("starting")
        return await self.averager.contribution(self._nursery, round_, asker)

    async def export_state(self, stage: int) -> StageState:
        """The stage state and the round it is after, for a mover or a drifted copy."""
        if stage != self.stage or self.averager is None:
            raise WrongStage(f"this server serves stage {self.stage}", moved=True)
        return await self.averager.export()

    # --- status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        stats = self.server.statistics() if self.server else None
        averager = self.averager
        return {
            "role": "server",
            "phase": "serving",
            "stage": self.stage,
            "speed": self.speed,
            "throughput": round(self.throughput(), 3),
            "calls": self.calls,
            "refused": self.refused,
            "forwards": stats.forwards if stats else 0,
            "backwards": stats.backwards if stats else 0,
            "steps": stats.steps if stats else 0,
            "round": averager.completed if averager else 0,
            "round_sizes": list(averager.contributors) if averager else [],
            "moves": list(self.moves),
            "resyncs": self._past_resyncs + (averager.drift.resyncs if averager else 0),
            "resumed": dict(self.resumed),
            "checkpoint_round": self.saved_round,
        }
