"""The data-parallel arm of a real run (`make real-run`): one model trained with the DiLoCo group's
combined batch on the same tokens, its learning rate tuned on the validation split, and the two
loss curves against tokens side by side.

What synchronous data parallel computes with W members of batch B is one model stepping on the
concatenation of the W members' batches (W·B): one step of it sees the tokens one inner step of
every member sees. DiLoCo's group counted `accepted` updates in a round, each H inner steps of
one member; its curve (the local swarm's `loss_curve`, the creator's eval loss after each round
against the tokens of every update counted up to it) is matched here step for step: the arm is
measured after the same number of tokens, on the same held-out eval batches (the token file's
`eval_chunks`, which no member trains on), with the same model, seed, AdamW and warm-up.

The learning rate is tuned, not assumed: each of `--lrs` trains `--tune-steps` steps from the
same start and is measured on the corpus's validation file (val.bin, 1% of the corpus, never
trained on by either arm); the best trains the arm. Tuning is short runs on a 2-core machine, so
it picks among learning rates by their early loss: say so beside the figures.

Usage: python benchmarks/real_run_baseline.py --report real-run-report.json --data DIR/train.bin
       [--lrs 2e-4,4e-4,8e-4] [--tune-steps N] [--png real-run.png]
The last line printed is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _report import print_json, print_table
from peertrain.swarm.data import ConcatBatches
from peertrain.swarm.data.corpus import file_digest
from peertrain.swarm.diloco import InnerConfig, InnerLoop, evaluate
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.exchange.traffic import data_parallel_bytes

EVAL_BATCHES = 8  # the members' own eval batches (swarm/diloco/member/build.py's default)
VAL_CHUNKS = 32  # chunks of val.bin the tuning measures on


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    diloco = json.loads(args.report.read_text())
    spec = run_spec(diloco["spec"], args.data)
    members = diloco["members"]
    dataset = spec.dataset_config().build(args.data)
    per_step = members * spec.batch_size * dataset.config.block_size
    print(
        f"data parallel: 1 model, batch {members} x {spec.batch_size} (the group's), "
        f"{per_step:,} tokens a step; lr tuned over {args.lrs} on val.bin"
    )
    tuning = tune(spec, dataset, args, members)
    best = min(tuning, key=lambda t: t["val_loss"])["lr"]
    curve = train_arm(spec, dataset, members, best, diloco["loss_curve"], per_step)
    figures = report(diloco, spec, tuning, best, curve, per_step, started)
    if args.png is not None:
        try:
            figures["png"] = plot(diloco, curve, args.png)
        except ImportError:  # matplotlib: pip install -e '.[plots]'
            figures["png_missing"] = "matplotlib is not installed (pip install -e '.[plots]')"
            print(f"no {args.png}: {figures['png_missing']}")
    args.out.write_text(json.dumps(figures, indent=1))
    print_json(figures)
    return 0


def run_spec(fields: dict[str, Any], data: Path) -> DiLoCoSpec:
    """The run's spec as its creator made it, the token file named by its digest."""
    fields = json.loads(json.dumps(fields))  # a copy
    settings = fields.setdefault("dataset_settings", {})
    settings["data_digest"] = file_digest(data)
    return DiLoCoSpec.checked(fields)


def tune(spec: DiLoCoSpec, dataset, args: argparse.Namespace, members: int) -> list[dict]:
    """Each learning rate's validation loss after `tune_steps` steps from the run's start."""
    val = validation_batches(spec, args.data.with_name("val.bin"))
    steps = args.tune_steps if args.tune_steps is not None else spec.warmup_steps + 20
    out = []
    for lr in args.lrs:
        started = time.perf_counter()
        model = spec.model_config().build(seed=spec.seed)
        loop = InnerLoop(model, combined(spec, dataset, members), inner(spec, members, lr))
        loop.run(steps)
        loss = evaluate(model, val)
        out.append({"lr": lr, "val_loss": round(loss, 4), "seconds": round(_since(started), 1)})
        print(f"  lr {lr:g}: val loss {loss:.4f} after {steps} steps")
    return out


def train_arm(spec, dataset, members: int, lr: float, points: list[dict], per_step: int):
    """The arm's eval loss at each point of DiLoCo's curve (the same tokens, rounded up to a
    whole step), and its tokens per second."""
    model = spec.model_config().build(seed=spec.seed)
    loop = InnerLoop(model, combined(spec, dataset, members), inner(spec, members, lr))
    held_out = dataset.eval_batches(batch_size=64, max_batches=EVAL_BATCHES)
    curve, done, computing = [], 0, 0.0
    for point in points:
        target = math.ceil(point["trained"] / per_step)
        if target > done:
            started = time.perf_counter()
            loop.run(target - done)
            computing += _since(started)
            done = target
        loss = evaluate(model, held_out)
        curve.append({"round": point["round"], "trained": done * per_step, "loss": loss})
        print(f"  {done * per_step:>12,} tokens: eval loss {loss:.4f} (DiLoCo {point['loss']:.4f})")
    rate = done * per_step / computing if computing else None
    return {"points": curve, "steps": done, "tokens_per_s": rate}


def combined(spec: DiLoCoSpec, dataset, members: int) -> ConcatBatches:
    """Every member's shard's step-t batch, concatenated: the group's batch."""
    return ConcatBatches(
        [
            dataset.train_batches(i, members, batch_size=spec.batch_size, seed=spec.seed)
            for i in range(members)
        ]
    )


def inner(spec: DiLoCoSpec, members: int, lr: float) -> InnerConfig:
    return InnerConfig(
        steps=spec.inner_steps,
        batch_size=members * spec.batch_size,
        lr=lr,
        warmup_steps=spec.warmup_steps,
    )


def validation_batches(spec: DiLoCoSpec, val: Path) -> list:
    """Windows of the corpus's validation file (up to VAL_CHUNKS chunks of it), as the token
    dataset cuts them."""
    settings = {**spec.dataset_settings, "data_digest": file_digest(val)}
    config = type(spec.dataset_config())(**settings)
    chunks = val.stat().st_size // np.dtype(config.dtype).itemsize // config.chunk_tokens
    if chunks < 2:
        raise SystemExit(f"{val} holds {chunks} chunk(s) of {config.chunk_tokens}: too few")
    config = replace(config, eval_chunks=min(VAL_CHUNKS, chunks - 1))
    return config.build(val).eval_batches(batch_size=64)


def report(diloco, spec, tuning, lr, arm, per_step: int, started: float) -> dict[str, Any]:
    points = arm["points"]
    last_diloco, last_dp = diloco["loss_curve"][-1]["loss"], points[-1]["loss"]
    ddp = data_parallel_bytes(diloco["params"], steps=arm["steps"], members=diloco["members"])
    rows = [
        ("DiLoCo (int8, flag)", points[-1]["trained"], last_diloco, diloco["bytes_sent"]),
        (f"data parallel (lr {lr:g})", points[-1]["trained"], last_dp, ddp),
    ]
    print_table("eval loss at equal tokens", ("arm", "tokens", "loss", "bytes"), rows)
    fewer = ddp / max(diloco["bytes_sent"], 1)
    print(
        f"DiLoCo / data parallel: {last_diloco / last_dp:.3f}x the loss, {fewer:.0f}x fewer bytes"
    )
    return {
        "tuning": tuning,
        "lr": lr,
        "data_parallel": arm,
        "diloco_final_loss": last_diloco,
        "data_parallel_final_loss": last_dp,
        "loss_ratio": last_diloco / last_dp,
        "bytes_ratio": fewer,
        "tokens_per_step": per_step,
        "inner_steps": spec.inner_steps,
        "seconds": round(_since(started), 1),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def plot(diloco: dict, arm: dict, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, curve in (
        ("DiLoCo, 4 daemons", diloco["loss_curve"]),
        ("data parallel", arm["points"]),
    ):
        ax.plot(
            [p["trained"] / 1e6 for p in curve],
            [p["loss"] for p in curve],
            marker="o",
            ms=3,
            label=name,
        )
    ax.set_xlabel("tokens trained on (millions)")
    ax.set_ylabel("eval loss (held-out chunks)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)


def _since(started: float) -> float:
    return time.perf_counter() - started


def add_tuning_options(parser: argparse.ArgumentParser) -> None:
    """The learning rates tried, each trial's steps, torch's threads (real_run_tune.py too)."""
    parser.add_argument(
        "--lrs", type=lambda s: [float(v) for v in s.split(",")], default=[2e-4, 4e-4, 8e-4]
    )
    parser.add_argument(
        "--tune-steps",
        type=int,
        default=None,
        help="steps of each tuning trial (default: the run's warm-up and 20 more: within the "
        "warm-up every learning rate is the same ramp)",
    )
    parser.add_argument("--threads", type=int, default=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, required=True, help="the local swarm's report")
    parser.add_argument("--data", type=Path, required=True, help="the run's train.bin")
    add_tuning_options(parser)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("real-run-baseline.json"))
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
