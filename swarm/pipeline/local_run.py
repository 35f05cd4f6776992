"""One in-process SWARM run with the report `peertrain swarm local --mode swarm` prints.

The same run as node/cli/pipeline_local.py's daemons, in one process (threads, no sockets): N
servers dealt round-robin over S stages (speeds cycled over them, as `--speeds 1,2,4`), T trainers
sharing the microbatches, optional kill of one server at `kill_at` seconds, optional rebalancing,
and a report with the issue's keys. Tests and benchmarks use it where process start-up and
loopback overhead would drown what they measure; `ideal_throughput` and `static_throughput` mean
the same in both.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import trio
from peertrain.swarm.data.digits import DigitsDatasetConfig
from peertrain.swarm.models.mlp import MLPConfig

from .harness import InProcessSwarm, SwarmSpec, evaluate
from .trainer import PipelineTrainer, TrainerConfig
from .wiring import BACKWARD_COST, PipelineWiring


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRunConfig:
    nodes: int = 6
    stages: int = 3
    trainers: int = 2
    speeds: tuple[float, ...] = (1.0,)
    microbatches: int = 400  # in total, over all trainers
    batch_size: int = 16
    in_flight: int = 16  # per trainer
    target_batch: int = 128
    base_seconds: float = 1e-3  # per forward sample at speed 1
    codec: str = "fp32"
    kill_at: float | None = None  # seconds after the start: kill the first server of stage 1
    rebalance_period: float | None = None
    static_microbatches: int = 0  # >0: also time one fixed pipeline of the fastest servers
    seed: int = 0

    def __post_init__(self) -> None:
        if self.nodes < self.stages or self.stages < 2 or self.trainers < 1:
            raise ValueError("need at least 2 stages, one server per stage and one trainer")

    def spec(self) -> SwarmSpec:
        speeds: list[list[float]] = [[] for _ in range(self.stages)]
        for node in range(self.nodes):
            speeds[node % self.stages].append(self.speeds[node % len(self.speeds)])
        return SwarmSpec(
            speeds=tuple(tuple(s) for s in speeds),
            model=MLPConfig(hidden=64, depth=self.stages - 1),
            seed=self.seed,
            codec=self.codec,
            target_batch=self.target_batch,
            base_seconds=self.base_seconds,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRunReport:
    throughput: float  # samples/s over the whole run
    ideal_throughput: float  # Σ of the slowest stage's server capacities
    static_throughput: float | None
    lost_microbatches: int
    retries: int
    initial_loss: float
    final_loss: float
    accuracy: float
    stage_sizes: list[list[int]] = field(default_factory=list)
    killed: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def ideal_throughput(spec: SwarmSpec) -> float:
    if spec.base_seconds <= 0:
        return float("inf")
    last = spec.num_stages - 1
    return min(
        sum(speeds) / ((BACKWARD_COST if s == last else 1.0 + BACKWARD_COST) * spec.base_seconds)
        for s, speeds in enumerate(spec.speeds)
    )


async def _train(
    swarm: InProcessSwarm,
    config: LocalRunConfig,
    *,
    trainers: int,
    microbatches: int,
    only: set[str] | None = None,
) -> list[PipelineTrainer]:
    data = DigitsDatasetConfig().build()
    group = []
    for index in range(trainers):
        wiring = PipelineWiring(config.stages, seed=config.seed * 101 + index)
        swarm.attach(wiring, only=only)
        group.append(
            PipelineTrainer(
                num_stages=config.stages,
                transport=swarm,
                wiring=wiring,
                config=TrainerConfig(in_flight=config.in_flight),
            )
        )
    share = microbatches // trainers
    async with trio.open_nursery() as nursery:
        for index, trainer in enumerate(group):
            batches = data.train_batches(index, trainers, batch_size=config.batch_size, seed=0)
            nursery.start_soon(lambda t=trainer, b=batches: t.train(b, steps=share))
    return group


async def run_local(config: LocalRunConfig) -> LocalRunReport:
    data = DigitsDatasetConfig().build()
    x, y = data.x[data.eval_index], data.y[data.eval_index]
    swarm = InProcessSwarm(config.spec())
    initial_loss, _ = evaluate(swarm, x, y)
    killed: list[str] = []  # set only if the kill really happened during the run
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        if config.kill_at is not None:

            async def kill(delay: float) -> None:
                await trio.sleep(delay)
                victim = swarm.members(1)[0].peer
                swarm.kill(victim)
                killed.append(victim)

            nursery.start_soon(kill, config.kill_at)
        if config.rebalance_period is not None:
            nursery.start_soon(swarm.rebalance_every, config.rebalance_period)
        trainers = await _train(
            swarm, config, trainers=config.trainers, microbatches=config.microbatches
        )
        nursery.cancel_scope.cancel()
    elapsed = time.perf_counter() - started
    final_loss, accuracy = evaluate(swarm, x, y)
    stats = [t.statistics() for t in trainers]
    return LocalRunReport(
        throughput=sum(s.samples for s in stats) / elapsed,
        ideal_throughput=ideal_throughput(swarm.spec),
        static_throughput=await _static_throughput(config) if config.static_microbatches else None,
        lost_microbatches=sum(s.lost for s in stats),
        retries=sum(s.retries for s in stats),
        initial_loss=initial_loss,
        final_loss=final_loss,
        accuracy=accuracy,
        stage_sizes=swarm.stage_sizes,
        killed=killed[0] if killed else None,
    )


async def _static_throughput(config: LocalRunConfig) -> float:
    """One fixed pipeline, the fastest server of each stage, same conditions otherwise."""
    swarm = InProcessSwarm(config.spec())
    fastest = {max(swarm.members(s), key=lambda h: h.speed).peer for s in range(config.stages)}
    started = time.perf_counter()
    trainers = await _train(
        swarm,
        config,
        trainers=config.trainers,
        microbatches=config.static_microbatches,
        only=fastest,
    )
    return sum(t.statistics().samples for t in trainers) / (time.perf_counter() - started)
