"""One in-process SWARM run with the report `peertrain swarm local --mode swarm` prints.

The same run as the daemons of node/cli/swarm_pipeline.py, in one process (no sockets): N
stage services dealt round-robin over S stages (speeds cycled over them, as `--speeds 1,2,4`),
T trainer loops sharing the microbatches, each opening with `static_seconds` of a fixed
pipeline (the `static_throughput` baseline), optional kill of one server of stage 1 at
`kill_at` seconds into the SWARM phase, optional rebalancing by the servers' own loops. The
services and trainer loops are the daemons' own (pipeline_harness.py), so `throughput`,
`ideal_throughput` and `static_throughput` mean the same in both; tests and benchmarks use it
where process start-up and loopback overhead would drown what they measure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import trio
from peertrain.swarm.data.digits import DigitsDatasetConfig
from peertrain.swarm.models.mlp import MLPConfig
from peertrain.swarm.pipeline.trainer_loop import TrainerLoop
from peertrain.swarm.pipeline.wiring import BACKWARD_COST

from .pipeline_harness import InProcessSwarm, SwarmSpec, evaluate, open_in_process_swarm

PHASE_POLL = 0.02


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
    kill_at: float | None = None  # seconds into the SWARM phase: kill the first server of stage 1
    rebalance_period: float | None = None
    static_seconds: float = 0.0  # >0: the trainers first time a fixed pipeline of the fastest
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
            batch_size=self.batch_size,
            rebalance_period=self.rebalance_period or 0.0,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalRunReport:
    throughput: float  # samples/s of the trainers in the SWARM phase
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


async def run_local(config: LocalRunConfig) -> LocalRunReport:
    data = DigitsDatasetConfig().build()
    x, y = data.x[data.eval_index], data.y[data.eval_index]
    async with open_in_process_swarm(config.spec()) as swarm:
        initial_loss, _ = evaluate(swarm, x, y)
        killed: list[str] = []  # set only if the kill really happened during the run
        async with trio.open_nursery() as nursery:
            nursery.start_soon(swarm.watch_sizes)
            loops = [
                await swarm.add_trainer(
                    f"t{index}",
                    microbatches=config.microbatches // config.trainers,
                    in_flight=config.in_flight,
                    static_seconds=config.static_seconds,
                )
                for index in range(config.trainers)
            ]
            if config.kill_at is not None:
                nursery.start_soon(_kill_in_swarm_phase, swarm, loops, config.kill_at, killed)
            while not all(loop.finished for loop in loops):  # noqa: ASYNC110 — loops expose
                await trio.sleep(PHASE_POLL)  # no event; their `finished` is their status
            nursery.cancel_scope.cancel()
        final_loss, accuracy = evaluate(swarm, x, y)
        return _report(swarm, loops, initial_loss, final_loss, accuracy, killed)


async def _kill_in_swarm_phase(
    swarm: InProcessSwarm, loops: list[TrainerLoop], delay: float, killed: list[str]
) -> None:
    """Kill the first server of stage 1 `delay` seconds after every trainer is in SWARM phase
    (as the daemons' supervisor counts `--kill-at`)."""
    while not all(loop.swarm_started for loop in loops):  # noqa: ASYNC110 — a status, no event
        await trio.sleep(PHASE_POLL)
    await trio.sleep(delay)
    victim = swarm.members(1)[0].peer
    swarm.kill(victim)
    killed.append(victim)


def _report(
    swarm: InProcessSwarm,
    loops: list[TrainerLoop],
    initial_loss: float,
    final_loss: float,
    accuracy: float,
    killed: list[str],
) -> LocalRunReport:
    statuses = [loop.status() for loop in loops]
    statics = [s["static"]["throughput"] for s in statuses if s["static"]]
    return LocalRunReport(
        throughput=sum(s["swarm_samples"] / s["swarm_seconds"] for s in statuses),
        ideal_throughput=ideal_throughput(swarm.spec),
        static_throughput=sum(statics) if statics and len(statics) == len(loops) else None,
        lost_microbatches=sum(s["lost_microbatches"] for s in statuses),
        retries=sum(s["retries"] for s in statuses),
        initial_loss=initial_loss,
        final_loss=final_loss,
        accuracy=accuracy,
        stage_sizes=swarm.stage_sizes,
        killed=killed[0] if killed else None,
    )
