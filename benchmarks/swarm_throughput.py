"""SWARM pipeline throughput with heterogeneous servers, and int8 vs fp32 stage boundaries.

In process (swarm/pipeline/harness.py): real torch compute of a digits MLP cut into 3 stages, each
call padded to base_seconds · cost · rows / speed to model slower machines (forward cost 1,
backward 2.5). Every stage has servers at speeds 1:2:4.

    swarm      the throughput-weighted wiring over all servers
    static     one fixed pipeline: the fastest server of each stage (the best static choice)
    ideal      Σ of the slowest stage's server capacities (speed / (cost per sample · base))

Then the same number of microbatches with fp32 and with int8 boundaries, one microbatch in flight
so the two runs see the same data in the same order: eval accuracy on the digits eval split.
Last line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.swarm.data.digits import DigitsDatasetConfig  # noqa: E402
from peertrain.swarm.pipeline.harness import InProcessSwarm, SwarmSpec, evaluate  # noqa: E402
from peertrain.swarm.pipeline.trainer import PipelineTrainer, TrainerConfig  # noqa: E402
from peertrain.swarm.pipeline.wiring import BACKWARD_COST, PipelineWiring  # noqa: E402

STAGES = 3
SPEEDS = (1.0, 2.0, 4.0)
BATCH = 16


def ideal_throughput(speeds: tuple[float, ...], base: float) -> float:
    """Samples/s of the bottleneck stage when every one of its servers is busy all the time."""
    per_sample = [
        (BACKWARD_COST if stage == STAGES - 1 else 1.0 + BACKWARD_COST) * base
        for stage in range(STAGES)
    ]
    return min(sum(speeds) / cost for cost in per_sample)


async def measure(
    *, static: bool, microbatches: int, in_flight: int, base: float
) -> tuple[float, int]:
    """(samples/s, lost microbatches) of one trainer through the swarm or the static pipeline."""
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=BATCH, seed=0)
    swarm = InProcessSwarm(SwarmSpec(speeds=(SPEEDS,) * STAGES, base_seconds=base))
    wiring = PipelineWiring(STAGES, seed=0)
    fastest = {f"s{stage}-{len(SPEEDS) - 1}" for stage in range(STAGES)}
    swarm.attach(wiring, only=fastest if static else None)
    trainer = PipelineTrainer(
        num_stages=STAGES,
        transport=swarm,
        wiring=wiring,
        config=TrainerConfig(in_flight=in_flight),
    )
    warmup = microbatches // 10  # the EMAs start from no measurement; do not time that
    await trainer.train(batches, steps=warmup)
    started = time.perf_counter()
    await trainer.train(batches, steps=microbatches, start=warmup)
    elapsed = time.perf_counter() - started
    return microbatches * BATCH / elapsed, trainer.statistics().lost


async def accuracy(codec: str, microbatches: int) -> tuple[float, float, float]:
    """(initial loss, final loss, eval accuracy) after `microbatches` with `codec` boundaries."""
    data = DigitsDatasetConfig().build()
    batches = data.train_batches(0, 1, batch_size=BATCH, seed=1)
    swarm = InProcessSwarm(
        SwarmSpec(speeds=((1.0, 1.0),) * STAGES, codec=codec, target_batch=4 * BATCH)
    )
    wiring = PipelineWiring(STAGES, seed=1)
    swarm.attach(wiring)
    trainer = PipelineTrainer(
        num_stages=STAGES, transport=swarm, wiring=wiring, config=TrainerConfig(in_flight=1)
    )
    x, y = data.x[data.eval_index], data.y[data.eval_index]
    initial, _ = evaluate(swarm, x, y)
    await trainer.train(batches, steps=microbatches)
    final, acc = evaluate(swarm, x, y)
    return initial, final, acc


async def main(args: argparse.Namespace) -> None:
    ideal = ideal_throughput(SPEEDS, args.base)
    swarm_tp, swarm_lost = await measure(
        static=False, microbatches=args.microbatches, in_flight=args.in_flight, base=args.base
    )
    static_tp, _ = await measure(
        static=True, microbatches=args.microbatches // 2, in_flight=args.in_flight, base=args.base
    )
    print_table(
        f"SWARM throughput, {STAGES} stages x speeds {SPEEDS}, microbatch {BATCH}, "
        f"{args.in_flight} in flight",
        ["pipeline", "samples/s", "vs ideal", "vs static"],
        [
            ["ideal", ideal, 1.0, ideal / static_tp],
            ["swarm", swarm_tp, swarm_tp / ideal, swarm_tp / static_tp],
            ["static", static_tp, static_tp / ideal, 1.0],
        ],
    )
    rows, figures = [], {}
    for codec in ("fp32", "int8"):
        initial, final, acc = await accuracy(codec, args.accuracy_microbatches)
        rows.append([codec, initial, final, acc])
        figures[codec] = {"initial_loss": initial, "final_loss": final, "accuracy": acc}
    print_table(
        f"boundaries: {args.accuracy_microbatches} microbatches of {BATCH}, same data and order",
        ["codec", "initial loss", "final loss", "eval accuracy"],
        rows,
    )
    print_json(
        {
            "throughput": swarm_tp,
            "ideal_throughput": ideal,
            "static_throughput": static_tp,
            "throughput_vs_ideal": swarm_tp / ideal,
            "throughput_vs_static": swarm_tp / static_tp,
            "lost_microbatches": swarm_lost,
            "accuracy_fp32": figures["fp32"]["accuracy"],
            "accuracy_int8": figures["int8"]["accuracy"],
            "accuracy_gap_points": 100
            * (figures["fp32"]["accuracy"] - figures["int8"]["accuracy"]),
            "final_loss_fp32": figures["fp32"]["final_loss"],
            "final_loss_int8": figures["int8"]["final_loss"],
        }
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--base", type=float, default=5e-3, help="seconds per sample at speed 1")
    parser.add_argument("--accuracy-microbatches", type=int, default=600)
    trio.run(main, parser.parse_args())
