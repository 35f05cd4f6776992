"""A whole SWARM in one process: the real stage services and trainer loops on a memory transport.

Tests and benchmarks need many heterogeneous, killable servers without processes or sockets. Each
server here is the daemon's own `StageService` (stage_service.py: serve lock, padding to
`base_seconds · work / speed`, throughput measurement, averaging rounds with drift repair,
state downloads, the rebalancing rule), reached through `MemoryStageNetwork` (pipeline_memory.py)
instead of libp2p, and deciding from one shared `RunState` (every peer's replica, converged at once:
what gossip gives the daemons a moment later). Trainers are a `PipelineTrainer` over
`swarm.transport` whose wiring follows RunState through the trainer loop's `WiringSync`
(`attach`, `new_trainer`), or whole `TrainerLoop`s (`add_trainer`), as a trainer daemon runs.

`kill(peer)` ends a server's tasks and fails its current and future calls, exactly as a dead
peer looks to the others (`ServerUnavailable`); its member record stays until its lease ends,
as on the network; `restart(peer)` brings it back with its own checkpoints (given a
`checkpoints` folder), as a daemon restarted on its home. `rebalance(period)` lets every live
server renew its record and evaluate that period's move on the same view (one of them moves:
downloads its new stage's state and switches); `rebalance_every(s)` runs every server's own
rebalancing loop, with its settled-view rule.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import trio
from peertrain.crdt.runstate import RunState
from peertrain.crdt.writer import RunWriter
from peertrain.swarm.models.config import config_to_dict
from peertrain.swarm.models.gpt import GPTConfig
from peertrain.swarm.models.mlp import MLPConfig
from peertrain.swarm.pipeline.checkpoint import StageCheckpoints
from peertrain.swarm.pipeline.membership import PipelinePeer, servers
from peertrain.swarm.pipeline.rebalance import Move, StageView
from peertrain.swarm.pipeline.run_spec import PipelineSpec
from peertrain.swarm.pipeline.stage import StageServer
from peertrain.swarm.pipeline.stage_service import StageService
from peertrain.swarm.pipeline.trainer import PipelineTrainer, TrainerConfig
from peertrain.swarm.pipeline.trainer_loop import TrainerLoop, WiringSync
from peertrain.swarm.pipeline.wiring import PipelineWiring

from .pipeline_memory import MemoryStageNetwork

RUN_ID = "in-process-swarm"
SETTLE_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SwarmSpec:
    """`speeds[s]` lists the relative speeds of stage s's servers (its length: how many); the
    rest is the run's `PipelineSpec` (`trainer_spec` adds the trainers' settings)."""

    speeds: tuple[tuple[float, ...], ...]
    model: MLPConfig | GPTConfig = MLPConfig(hidden=64, depth=2)  # a GPT trains on text
    seed: int = 0
    codec: str = "fp32"
    target_batch: int = 256  # samples per stage step, summed over the stage's servers
    base_seconds: float = 0.0  # per forward sample at speed 1; 0: no artificial slowdown
    batch_size: int = 16
    rebalance_period: float = 0.0  # servers' own rebalancing loops; 0: only `rebalance()`
    checkpoint_every: int = 0  # rounds between stage checkpoints (with a `checkpoints` folder)

    @property
    def num_stages(self) -> int:
        return len(self.speeds)

    def pipeline_spec(self, **trainer_settings: object) -> PipelineSpec:
        model = self.model
        gpt = isinstance(model, GPTConfig)
        return PipelineSpec(
            model="gpt" if gpt else "mlp",
            model_settings=config_to_dict(model),
            dataset="text" if gpt else "digits",
            dataset_settings={"block_size": model.block_size} if gpt else {},
            stages=self.num_stages,
            batch_size=self.batch_size,
            target_batch=self.target_batch,
            codec=self.codec,
            rebalance_period=self.rebalance_period,
            base_seconds=self.base_seconds,
            checkpoint_every=self.checkpoint_every,
            seed=self.seed,
            **trainer_settings,  # type: ignore[arg-type]
        )


class ServerHost:
    """One in-process server: its real `StageService`, and the scope that ends it."""

    def __init__(self, peer: str, service: StageService) -> None:
        self.peer, self.service = peer, service
        self.scope = trio.CancelScope()
        self.alive = True

    @property
    def stage(self) -> int:
        return self.service.stage

    @property
    def speed(self) -> float:
        return self.service.speed

    @property
    def server(self) -> StageServer:
        assert self.service.server is not None, "a host is listed once its service serves"
        return self.service.server


class InProcessSwarm:
    """Stage services on one memory network; open it with `open_in_process_swarm`."""

    def __init__(
        self, spec: SwarmSpec, nursery: trio.Nursery, checkpoints: Path | None = None
    ) -> None:
        self.spec, self._nursery, self.checkpoints = spec, nursery, checkpoints
        self.run_spec = spec.pipeline_spec()
        self.state = RunState(RUN_ID)
        self.network = MemoryStageNetwork()
        self.transport = self.network.client("trainer")  # for `PipelineTrainer`s in tests
        self.hosts: dict[str, ServerHost] = {}
        self.stage_sizes: list[list[int]] = []
        self._syncs: list[WiringSync] = []

    async def _start_server(self, peer: str, *, stage: int | None, speed: float) -> ServerHost:
        service = StageService(
            self.run_spec,
            self._peer(peer),
            peers=self.network.client(peer),
            creator="s0-0",
            speed=speed,
            stage=stage,
            checkpoints=None
            if self.checkpoints is None
            else StageCheckpoints(self.checkpoints / peer),
        )
        self.network.register(peer, service)
        host = ServerHost(peer, service)
        await self._nursery.start(self._serve, host)
        self.hosts[peer] = host
        return host

    def _peer(self, name: str) -> PipelinePeer:
        """A peer of this process's run: its writer writes the shared RunState."""
        return PipelinePeer(me=name, state=self.state, writer=RunWriter(self.state, name))

    @staticmethod
    async def _serve(host: ServerHost, *, task_status: trio.TaskStatus[None]) -> None:
        with host.scope:
            await host.service.run(task_status=task_status)

    # --- membership -----------------------------------------------------------------------
    def attach(self, wiring: PipelineWiring, *, only: set[str] | None = None) -> None:
        """Tell a trainer's wiring of the live servers (all, kept in step with RunState after
        every join and move; or only these, a fixed pipeline)."""
        if only is not None:
            for peer in only:
                wiring[self.hosts[peer].stage].announce(peer)
            return
        sync = WiringSync(wiring, self.spec.num_stages)
        sync.update(servers(self.state, self.spec.num_stages))
        self._syncs.append(sync)

    def _changed(self) -> None:
        entries = servers(self.state, self.spec.num_stages)
        for sync in self._syncs:
            sync.update(entries)
        self.record_sizes()

    def record_sizes(self) -> None:
        sizes = self.sizes()
        if not self.stage_sizes or self.stage_sizes[-1] != sizes:
            self.stage_sizes.append(sizes)

    def members(self, stage: int) -> list[ServerHost]:
        return [h for h in self.hosts.values() if h.alive and h.stage == stage]

    def sizes(self) -> list[int]:
        return [len(self.members(stage)) for stage in range(self.spec.num_stages)]

    @property
    def steps(self) -> list[int]:
        """Optimizer steps per stage (its most advanced live server's)."""
        return [
            max((h.server.statistics().steps for h in self.members(stage)), default=0)
            for stage in range(self.spec.num_stages)
        ]

    def views(self) -> list[StageView]:
        """The view every server decides from (RunState: measured throughputs, demands)."""
        return next(iter(self.hosts.values())).service.views()

    def kill(self, peer: str) -> None:
        host = self.hosts[peer]
        host.alive = False
        self.network.kill(peer)
        host.scope.cancel()

    async def restart(self, peer: str) -> ServerHost:
        """A killed server comes back under its name, with its own checkpoints (a daemon
        restarted on its home); it serves its old stage with whatever state it finds."""
        old = self.hosts[peer]
        assert not old.alive, "kill a server before restarting it"
        host = await self._start_server(peer, stage=old.stage, speed=old.speed)
        self._changed()
        return host

    async def join(self, speed: float) -> str:
        """A new server joins the stage with the most need, with that stage's current state."""
        peer = f"j{len(self.hosts)}"
        await self._start_server(peer, stage=None, speed=speed)
        self._changed()
        return peer

    async def settle(self) -> None:
        """Until no averaging round is under way on any live server."""
        with trio.fail_after(SETTLE_TIMEOUT):
            while any(  # noqa: ASYNC110 — rounds run in the services' tasks, with no event
                h.service.averager is not None
                and h.service.averager.taken != h.service.averager.completed
                for h in self.hosts.values()
                if h.alive
            ):
                await trio.sleep(0.01)

    # --- rebalancing ----------------------------------------------------------------------
    async def rebalance(self, period: int) -> Move | None:
        """One period, compressed: every live server renews its record (what its announce loop
        does every few seconds), then evaluates `period`'s move on that same view; the move
        made, if any."""
        made: list[Move] = []
        live = [h for h in self.hosts.values() if h.alive]
        for host in live:
            host.service.announce()

        async def evaluate(service: StageService) -> None:
            move = await service.rebalance_once(period)
            if move is not None:
                made.append(move)

        async with trio.open_nursery() as nursery:
            for host in live:
                nursery.start_soon(evaluate, host.service)
        self._changed()
        return made[0] if made else None

    async def rebalance_every(self, seconds: float) -> None:
        """Every live server's own rebalancing loop, one period every `seconds`, forever."""
        async with trio.open_nursery() as nursery:
            for host in [h for h in self.hosts.values() if h.alive]:
                nursery.start_soon(host.service.rebalance_loop, seconds)
            await self.watch_sizes()

    async def watch_sizes(self, interval: float = 0.05) -> None:
        """Keep `stage_sizes` and attached wirings up to date with moves the servers make."""
        while True:
            await trio.sleep(interval)
            if self.sizes() != self.stage_sizes[-1]:
                self._changed()

    # --- trainers -------------------------------------------------------------------------
    def new_trainer(
        self, *, seed: int = 0, in_flight: int = 16, only: set[str] | None = None
    ) -> PipelineTrainer:
        """A `PipelineTrainer` on this swarm, its wiring attached (see `attach`)."""
        wiring = PipelineWiring(self.spec.num_stages, seed=seed)
        self.attach(wiring, only=only)
        return PipelineTrainer(
            num_stages=self.spec.num_stages,
            transport=self.transport,
            wiring=wiring,
            config=TrainerConfig(in_flight=in_flight),
        )

    async def add_trainer(self, name: str, **settings: object) -> TrainerLoop:
        """A whole trainer loop (wiring sync, static phase, step loop), as a trainer daemon's;
        `settings`: the run's trainer settings (microbatches, in_flight, static_seconds…)."""
        spec = self.spec.pipeline_spec(**settings)
        loop = TrainerLoop(spec, self._peer(name), transport=self.network.client(name))
        await self._nursery.start(loop.run)
        return loop


@asynccontextmanager
async def open_in_process_swarm(
    spec: SwarmSpec, *, checkpoints: Path | None = None
) -> AsyncIterator[InProcessSwarm]:
    """The servers of `spec.speeds` (peer IDs `s<stage>-<index>`), serving; ended on exit.
    `checkpoints`: a folder where each server keeps its stage checkpoints (`<folder>/<peer>`)."""
    async with trio.open_nursery() as nursery:
        swarm = InProcessSwarm(spec, nursery, checkpoints)
        for stage, speeds in enumerate(spec.speeds):
            for index, speed in enumerate(speeds):
                await swarm._start_server(f"s{stage}-{index}", stage=stage, speed=speed)
        swarm.record_sizes()
        try:
            yield swarm
        finally:
            nursery.cancel_scope.cancel()


def evaluate(swarm: InProcessSwarm, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(loss, accuracy) of the model formed by the first live server of each stage."""
    with torch.no_grad():
        h = x
        for stage in range(swarm.spec.num_stages):
            h = swarm.members(stage)[0].server.module(h)
        logits, labels = h.reshape(-1, h.shape[-1]), y.reshape(-1)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return float(loss), float((logits.argmax(-1) == labels).float().mean())
