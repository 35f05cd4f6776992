"""The real run's inner learning rate, tuned on the validation split (`make real-run-tune`).

A DiLoCo member's inner loop is plain AdamW on its own batches, so its learning rate is tuned
as one worker's: each of `--lrs` trains `--tune-steps` steps of one member's batch from the
run's seed and warm-up, and is measured on the corpus's validation file (val.bin, never trained
on). The data-parallel arm's learning rate is tuned the same way, on the group's combined batch,
by benchmarks/real_run_baseline.py after the run. Short trials on a 2-core machine rank learning
rates by their early loss; the printed table says how far apart they were.

H is not tuned here: the issue's byte target fixes its floor (the sharded exchange sends
2Hn/(n − 1) times fewer bytes than data parallel: 100x from H = 38 at n = 4) and the hour its
ceiling (outer steps left); `make real-run` takes REAL_RUN_H = 40.

Usage: python benchmarks/real_run_tune.py --data DIR/train.bin [--model gpt-25m]
       [--batch-size 2] [--warmup-steps 20] [--lrs 2e-4,4e-4,8e-4] [--tune-steps N]
The last line printed is one JSON object: every trial and the best learning rate.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from _report import print_json, print_table
from real_run_baseline import add_tuning_options, run_spec, tune


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    spec = run_spec(
        {
            "model": args.model,
            "model_settings": dict(_setting(s) for s in args.set),
            "dataset": "tokens",
            "dataset_settings": {"block_size": args.block_size, "eval_chunks": 8},
            "batch_size": args.batch_size,
            "inner_steps": args.inner_steps,
            "warmup_steps": args.warmup_steps,
        },
        args.data,
    )
    dataset = spec.dataset_config().build(args.data)
    print(
        f"inner lr of one member: {args.model}, batch {spec.batch_size} x "
        f"{dataset.config.block_size} tokens, lr tuned over {args.lrs} on val.bin"
    )
    trials = tune(spec, dataset, args, members=1)
    best = min(trials, key=lambda t: t["val_loss"])
    print_table(
        "inner learning rate, one member",
        ("lr", "val loss", "seconds"),
        [(f"{t['lr']:g}", f"{t['val_loss']:.4f}", t["seconds"]) for t in trials],
    )
    print(f"best: --lr {best['lr']:g} (val loss {best['val_loss']:.4f})")
    print_json(
        {
            "model": args.model,
            "batch_size": spec.batch_size,
            "tune_steps": args.tune_steps or spec.warmup_steps + 20,
            "trials": trials,
            "lr": best["lr"],
            "seconds": round(time.perf_counter() - started, 1),
            "load_1min": round(os.getloadavg()[0], 2),
        }
    )
    return 0


def _setting(text: str) -> tuple[str, int | float | str]:
    key, _, value = text.partition("=")
    for kind in (int, float):
        try:
            return key.removeprefix("model_settings."), kind(value)
        except ValueError:
            pass
    return key.removeprefix("model_settings."), value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the run's train.bin")
    parser.add_argument("--model", default="gpt-25m")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a model setting (model_settings.KEY), as the run's --set takes it",
    )
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--inner-steps", type=int, default=40)
    parser.add_argument(
        "--warmup-steps", type=int, default=20, help="the run's (--set warmup_steps)"
    )
    add_tuning_options(parser)
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
