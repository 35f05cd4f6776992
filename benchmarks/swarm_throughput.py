"""SWARM pipeline throughput with heterogeneous servers, and int8 vs fp32 stage boundaries.

In process (testing/pipeline_harness.py: the daemons' own stage services on a memory transport):
real torch compute of a digits MLP cut into 3 stages, each call padded to
base_seconds · cost · rows / speed to model slower machines (forward cost 1, backward 2.5).
Every stage has servers at speeds 1:2:4.

    swarm      the throughput-weighted wiring over all servers
    static     one fixed pipeline: the fastest server of each stage (the best static choice)
    ideal      Σ of the slowest stage's server capacities (speed / (cost per sample · base))

Throughput is the steady rate between 10% and 75% of the microbatches completed (see
`steady_rate`), the same window for every arm.

Rebalancing: 6 equal servers started 4/1/1 over the 3 stages, with and without the servers'
rebalancing loops (0.5 s periods, a move only on a view settled for a period), steady throughput
once the moves are done, vs the 2/2/2 ideal.

Then the same number of microbatches with fp32 and with int8 boundaries, one microbatch in flight
so the two runs see the same data in the same order: eval accuracy on the digits eval split.

The GPT (`gpt_*` figures): a tiny byte-level GPT cut into the same 3 stages (embeddings with the
first, final norm + head + loss with the last) on the standard-library text, the same
swarm/static/ideal comparison at speeds 1:2:4, and fp32 vs int8 boundaries: eval loss on held-out
text after the same microbatches (`gpt_int8_loss_gap`: int8 minus fp32).

With `--daemons SECONDS`: the same heterogeneous case over the network, 6 server daemons and 2
trainer daemons as processes (`peertrain swarm local --mode swarm --speeds 1,2,4`), SECONDS of
SWARM phase after a static-pipeline phase measured by the same trainers; its report's figures are
added under `daemons_*` (its stages are dealt round-robin, so stage 0 holds the slowest servers);
then once more with rebalancing every 5 s (`daemons_rebalancing_*`): servers move towards the slow
stage, and the ideal to compare with is that of the layout reached (`final_ideal_throughput`).
Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.swarm.data.batches import Batches  # noqa: E402
from peertrain.swarm.data.digits import DigitsDatasetConfig  # noqa: E402
from peertrain.swarm.data.text import TextDatasetConfig  # noqa: E402
from peertrain.swarm.models.gpt import GPTConfig  # noqa: E402
from peertrain.swarm.models.mlp import MLPConfig  # noqa: E402
from peertrain.swarm.pipeline.trainer import PipelineTrainer  # noqa: E402
from peertrain.swarm.pipeline.wiring import BACKWARD_COST  # noqa: E402
from peertrain.testing.pipeline_harness import SwarmSpec, evaluate, open_in_process_swarm  # noqa: E402

STAGES = 3
SPEEDS = (1.0, 2.0, 4.0)
BATCH = 16


@dataclass(frozen=True, slots=True)
class Workload:
    """A model the pipeline cuts into `STAGES` stages and the data it trains on."""

    name: str
    model: MLPConfig | GPTConfig

    def data(self):
        return _dataset(self)

    def batches(self, seed: int) -> Batches:
        return self.data().train_batches(0, 1, batch_size=BATCH, seed=seed)

    def eval_batch(self):
        data = self.data()
        if isinstance(self.model, GPTConfig):
            return data.eval_batches(batch_size=64, max_batches=1)[0]
        return data.x[data.eval_index], data.y[data.eval_index]


@functools.cache
def _dataset(workload: Workload):
    if isinstance(workload.model, GPTConfig):  # the stdlib text, cut to the GPT's context
        return TextDatasetConfig(block_size=workload.model.block_size, max_bytes=1 << 20).build()
    return DigitsDatasetConfig().build()


MLP = Workload("mlp", MLPConfig(hidden=64, depth=2))
# a tiny GPT, one block per stage: embeddings with stage 0, final norm + head + loss with stage 2
GPT = Workload("gpt", GPTConfig(n_layer=3, n_embd=32, n_head=2, block_size=32))


def ideal_throughput(speeds: tuple[float, ...], base: float) -> float:
    """Samples/s of the bottleneck stage when every one of its servers is busy all the time."""
    per_sample = [
        (BACKWARD_COST if stage == STAGES - 1 else 1.0 + BACKWARD_COST) * base
        for stage in range(STAGES)
    ]
    return min(sum(speeds) / cost for cost in per_sample)


async def measure(
    *, static: bool, microbatches: int, in_flight: int, base: float, workload: Workload = MLP
) -> tuple[float, int]:
    """(samples/s, lost microbatches) of one trainer through the swarm or the static pipeline."""
    batches = workload.batches(seed=0)
    spec = SwarmSpec(speeds=(SPEEDS,) * STAGES, base_seconds=base, model=workload.model)
    async with open_in_process_swarm(spec) as swarm:
        fastest = {f"s{stage}-{len(SPEEDS) - 1}" for stage in range(STAGES)}
        trainer = swarm.new_trainer(in_flight=in_flight, only=fastest if static else None)
        return await steady_throughput(trainer, batches, microbatches), trainer.statistics().lost


async def steady_throughput(
    trainer: PipelineTrainer, batches: Batches, microbatches: int, *, start: int = 0
) -> float:
    """Samples/s of `trainer` over `microbatches`, measured by `steady_rate`."""
    samples: list[tuple[float, int]] = []
    done_before = trainer.statistics().completed

    async def sample_progress() -> None:
        while True:  # a fixed-rate sampler, not a wait: it records the completion curve
            samples.append((time.perf_counter(), trainer.statistics().completed - done_before))
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_progress)
        await trainer.train(batches, steps=microbatches, start=start)
        nursery.cancel_scope.cancel()
    return steady_rate(samples, microbatches) * BATCH


def steady_rate(samples: list[tuple[float, int]], total: int) -> float:
    """Microbatches/s between 10% and 75% completed: after the EMAs warmed up, before the drain.

    Timing start to end would count the start (no measurements yet) and the drain (the last
    `in_flight` microbatches finishing on ever fewer servers), which a continuous run never has.
    """
    start = next(s for s in samples if s[1] >= total // 10)
    end = next(s for s in samples if s[1] >= total * 3 // 4)
    return (end[1] - start[1]) / (end[0] - start[0])


async def rebalancing(
    *, enabled: bool, microbatches: int, in_flight: int, base: float
) -> tuple[float, list[list[int]], int]:
    """6 equal servers started 4/1/1, with or without rebalancing (one period per 0.5 s):
    (steady samples/s once the moves are done, stage sizes over time, lost microbatches)."""
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=BATCH, seed=0)
    spec = SwarmSpec(speeds=((1.0,) * 4, (1.0,), (1.0,)), base_seconds=base)
    async with open_in_process_swarm(spec) as swarm, trio.open_nursery() as nursery:
        trainer = swarm.new_trainer(in_flight=in_flight)
        if enabled:  # the servers' own loops: a move once a view has settled for a period
            nursery.start_soon(swarm.rebalance_every, 0.5)
        await trainer.train(batches, steps=2 * in_flight)  # the moves happen in here (~2 s)
        rate = await steady_throughput(trainer, batches, microbatches, start=2 * in_flight)
        nursery.cancel_scope.cancel()
        return rate, swarm.stage_sizes, trainer.statistics().lost


async def accuracy(
    codec: str, microbatches: int, workload: Workload = MLP
) -> tuple[float, float, float]:
    """(initial loss, final loss, eval accuracy) after `microbatches` with `codec` boundaries
    (the GPT's accuracy: of its next-byte predictions)."""
    batches = workload.batches(seed=1)
    spec = SwarmSpec(
        speeds=((1.0, 1.0),) * STAGES, codec=codec, target_batch=4 * BATCH, model=workload.model
    )
    async with open_in_process_swarm(spec) as swarm:
        trainer = swarm.new_trainer(seed=1, in_flight=1)
        x, y = workload.eval_batch()
        initial, _ = evaluate(swarm, x, y)
        await trainer.train(batches, steps=microbatches)
        await swarm.settle()
        final, acc = evaluate(swarm, x, y)
        return initial, final, acc


async def main(args: argparse.Namespace) -> None:
    in_process = await _in_process(args)
    rebalanced = await _rebalancing(args)
    figures = await _boundaries(args)
    gpt = await _in_process(args, GPT), await _boundaries(args, GPT)
    daemons = run_daemons(args.daemons, args.base) if args.daemons else {}
    moving = run_daemons(args.daemons, args.base, rebalance=5.0) if args.daemons else {}
    if daemons:
        _print_daemons(daemons, moving)
    print_json({**_figures(in_process, rebalanced, figures, daemons, moving), **_gpt_figures(*gpt)})


async def _in_process(args: argparse.Namespace, workload: Workload = MLP) -> dict:
    ideal = ideal_throughput(SPEEDS, args.base)
    settings = {"in_flight": args.in_flight, "base": args.base, "workload": workload}
    swarm_tp, swarm_lost = await measure(static=False, microbatches=args.microbatches, **settings)
    static_tp, _ = await measure(static=True, microbatches=args.microbatches // 2, **settings)
    print_table(
        f"SWARM throughput, {workload.name} in {STAGES} stages x speeds {SPEEDS}, "
        f"microbatch {BATCH}, {args.in_flight} in flight",
        ["pipeline", "samples/s", "vs ideal", "vs static"],
        [
            ["ideal", ideal, 1.0, ideal / static_tp],
            ["swarm", swarm_tp, swarm_tp / ideal, swarm_tp / static_tp],
            ["static", static_tp, static_tp / ideal, 1.0],
        ],
    )
    return {"ideal": ideal, "swarm": swarm_tp, "static": static_tp, "lost": swarm_lost}


async def _rebalancing(args: argparse.Namespace) -> dict:
    fixed, _, lost_fixed = await rebalancing(
        enabled=False, microbatches=args.microbatches // 6, in_flight=16, base=args.base
    )
    moved, sizes, lost_moved = await rebalancing(
        enabled=True, microbatches=args.microbatches // 6, in_flight=16, base=args.base
    )
    two = 2 / ((1.0 + BACKWARD_COST) * args.base)  # stages 0 and 1 at 2 servers: the bottleneck
    print_table(
        "rebalancing: 6 equal servers started 4/1/1 (one move per 0.5 s period)",
        ["swarm", "samples/s", "ideal 2/2/2", "stage sizes"],
        [["no rebalancing", fixed, two, sizes[0]], ["rebalancing", moved, two, sizes[-1]]],
    )
    return {"fixed": fixed, "moved": moved, "sizes": sizes, "lost": lost_fixed + lost_moved}


async def _boundaries(args: argparse.Namespace, workload: Workload = MLP) -> dict:
    rows, figures = [], {}
    for codec in ("fp32", "int8"):
        initial, final, acc = await accuracy(codec, args.accuracy_microbatches, workload)
        rows.append([codec, initial, final, acc])
        figures[codec] = {"initial_loss": initial, "final_loss": final, "accuracy": acc}
    print_table(
        f"{workload.name} boundaries: {args.accuracy_microbatches} microbatches of {BATCH}, "
        "same data and order",
        ["codec", "initial loss", "final loss", "eval accuracy"],
        rows,
    )
    return figures


def _print_daemons(daemons: dict, moving: dict) -> None:
    ideal, static = daemons["ideal_throughput"], daemons["static_throughput"]
    print_table(
        "over the network: 6 server daemons (speeds 1,2,4 dealt over 3 stages), 2 trainers",
        ["pipeline", "samples/s", "vs ideal", "vs static"],
        [
            ["ideal", ideal, 1.0, ideal / static],
            [
                "swarm",
                daemons["throughput"],
                daemons["throughput"] / ideal,
                daemons["throughput"] / static,
            ],
            ["static", static, static / ideal, 1.0],
        ],
    )
    final_ideal, moving_static = moving["final_ideal_throughput"], moving["static_throughput"]
    layouts = " → ".join(str(s["sizes"]) for s in moving["stage_sizes"])
    print_table(
        "the same with rebalancing every 5 s (ideal and static of the layout the moves reach)",
        ["pipeline", "samples/s", "vs final ideal", "vs static", "layouts"],
        [
            ["ideal (final layout)", final_ideal, 1.0, final_ideal / moving_static, ""],
            [
                "swarm",
                moving["throughput"],
                moving["throughput"] / final_ideal,
                moving["throughput"] / moving_static,
                layouts,
            ],
            ["static", moving_static, moving_static / final_ideal, 1.0, ""],
        ],
    )


def _figures(in_process: dict, rebalanced: dict, figures: dict, daemons: dict, moving: dict):
    fp32, int8 = figures["fp32"], figures["int8"]
    return {
        **{f"daemons_{k}": v for k, v in daemons.items() if k in DAEMON_KEYS},
        **{
            f"daemons_rebalancing_{k}": v
            for k, v in moving.items()
            if k in (*DAEMON_KEYS, "final_ideal_throughput")
        },
        "daemons_rebalancing_moves": len(moving.get("moves", [])),
        "throughput": in_process["swarm"],
        "ideal_throughput": in_process["ideal"],
        "static_throughput": in_process["static"],
        "throughput_vs_ideal": in_process["swarm"] / in_process["ideal"],
        "throughput_vs_static": in_process["swarm"] / in_process["static"],
        "lost_microbatches": in_process["lost"] + rebalanced["lost"],
        "stage_sizes": rebalanced["sizes"],
        "throughput_411_fixed": rebalanced["fixed"],
        "throughput_411_rebalanced": rebalanced["moved"],
        "initial_loss": fp32["initial_loss"],
        "final_loss": fp32["final_loss"],
        "accuracy_fp32": fp32["accuracy"],
        "accuracy_int8": int8["accuracy"],
        "accuracy_gap_points": 100 * (fp32["accuracy"] - int8["accuracy"]),
        "final_loss_fp32": fp32["final_loss"],
        "final_loss_int8": int8["final_loss"],
    }


def _gpt_figures(in_process: dict, figures: dict) -> dict:
    fp32, int8 = figures["fp32"], figures["int8"]
    return {
        "gpt_throughput": in_process["swarm"],
        "gpt_ideal_throughput": in_process["ideal"],
        "gpt_static_throughput": in_process["static"],
        "gpt_throughput_vs_ideal": in_process["swarm"] / in_process["ideal"],
        "gpt_throughput_vs_static": in_process["swarm"] / in_process["static"],
        "gpt_lost_microbatches": in_process["lost"],
        "gpt_initial_loss": fp32["initial_loss"],
        "gpt_final_loss_fp32": fp32["final_loss"],
        "gpt_final_loss_int8": int8["final_loss"],
        "gpt_int8_loss_gap": int8["final_loss"] - fp32["final_loss"],
    }


DAEMON_KEYS = (
    "throughput",
    "ideal_throughput",
    "static_throughput",
    "lost_microbatches",
    "initial_loss",
    "final_loss",
    "startup_s",
)


def run_daemons(seconds: float, base: float, *, rebalance: float = 0.0) -> dict:
    """`peertrain swarm local --mode swarm` with speeds 1,2,4; its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "peertrain",
                "swarm",
                "local",
                "--mode",
                "swarm",
                "--nodes",
                "6",
                "--stages",
                str(STAGES),
                "--trainers",
                "2",
                "--speeds",
                ",".join(f"{s:g}" for s in SPEEDS),
                "--set",
                f"base_seconds={base}",
                "--set",
                "static_seconds=6",
                "--set",
                f"rebalance_period={rebalance}",
                "--duration",
                str(seconds),
                "--report",
                str(report),
            ],
            check=True,
            capture_output=True,
            timeout=seconds + 300,
        )
        return json.loads(report.read_text())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=600)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--base", type=float, default=5e-3, help="seconds per sample at speed 1")
    parser.add_argument("--accuracy-microbatches", type=int, default=600)
    parser.add_argument(
        "--daemons",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also run the network arm (daemon processes) for this many seconds",
    )
    trio.run(main, parser.parse_args())
