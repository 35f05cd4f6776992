"""DiLoCo quality against synchronous data parallel, on the same tokens, on a CPU.

Arms (every arm starts from the same initial weights; W workers, T inner steps per worker, batch B):

  dp            synchronous data parallel: W workers averaging gradients every step, i.e. one model
                stepping T times on the concatenation of the W workers' step-t batches (batch W·B);
  diloco-H-C    W DiLoCo members, each T steps on its own shard, an outer step every H steps, the
                pseudo-gradients sent with codec C (fp32, or int8 blockwise + error feedback);
  single        one worker alone: T steps of batch B on shard 0 (the same steps and wall-clock as
                one DiLoCo member; 1/W of the tokens): the baseline DiLoCo must beat;
  single-Wx     one worker on the same tokens as every other arm: W·T steps of batch B walking
                through the W shards' batches in turn (more, smaller updates; reported for context).

dp, diloco-* and single-Wx see exactly the same token windows (composed step-addressed batch
sources). All arms share the inner AdamW settings and schedule (warm-up, cosine to 10%), counted in
each arm's own steps. "sent" is bytes published per member summed over members; data parallel
publishes one fp32 gradient per member per step. Eval: mean loss on held-out chunks of the corpus.

Usage: python benchmarks/diloco_quality.py [--steps T] [--arms dp,diloco-50-int8,...]
The last line printed is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from peertrain.swarm.data import ConcatBatches, InterleavedBatches, TextDatasetConfig
from peertrain.swarm.diloco import (
    DiLoCoMember,
    InnerConfig,
    InnerLoop,
    OuterConfig,
    ProtocolCodec,
    UpdateCodec,
    data_parallel_bytes,
    evaluate,
)
from peertrain.swarm.models import GPTConfig, count_parameters
from peertrain.testing import LocalGroup


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    workers: int
    steps: int
    batch_size: int
    seed: int
    model: GPTConfig
    inner: InnerConfig
    outer: OuterConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmResult:
    name: str
    eval_loss: float
    tokens: int
    sent_bytes: int
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: what the arm costs on an idle core


def run_data_parallel(setup: Setup, dataset, evalset) -> ArmResult:
    started, cpu_started = time.perf_counter(), time.process_time()
    model = setup.model.build(seed=setup.seed)
    batches = ConcatBatches([shard(setup, dataset, i) for i in range(setup.workers)])
    InnerLoop(model, batches, with_total(setup.inner, setup.steps)).run(setup.steps)
    tokens = setup.steps * batches.batch_size * setup.model.block_size
    sent = data_parallel_bytes(count_parameters(model), steps=setup.steps, members=setup.workers)
    return ArmResult(
        name="dp",
        eval_loss=evaluate(model, evalset),
        tokens=tokens,
        sent_bytes=sent,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )


def run_single(setup: Setup, dataset, evalset, *, same_tokens: bool) -> ArmResult:
    started, cpu_started = time.perf_counter(), time.process_time()
    model = setup.model.build(seed=setup.seed)
    shards = [shard(setup, dataset, i) for i in range(setup.workers)]
    steps = setup.steps * setup.workers if same_tokens else setup.steps
    batches = InterleavedBatches(shards) if same_tokens else shards[0]
    InnerLoop(model, batches, with_total(setup.inner, steps)).run(steps)
    name = f"single-{setup.workers}x" if same_tokens else "single"
    return ArmResult(
        name=name,
        eval_loss=evaluate(model, evalset),
        tokens=steps * setup.batch_size * setup.model.block_size,
        sent_bytes=0,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )


def run_diloco(
    setup: Setup, dataset, evalset, *, h: int, codec_name: str, codec: Callable[[], UpdateCodec]
) -> ArmResult:
    started, cpu_started = time.perf_counter(), time.process_time()
    inner = with_total(setup.inner, setup.steps, steps=h)
    members = [
        DiLoCoMember(
            setup.model.build(seed=setup.seed),
            shard(setup, dataset, i),
            inner=inner,
            outer=setup.outer,
            codec=codec(),
        )
        for i in range(setup.workers)
    ]
    group = LocalGroup(members)
    for _ in range(setup.steps // h):
        reports = group.run_round()
    if len({r.state_hash for r in reports}) != 1:
        raise AssertionError("DiLoCo members ended with different state hashes")
    tokens = setup.workers * setup.steps * setup.batch_size * setup.model.block_size
    return ArmResult(
        name=f"diloco-{h}-{codec_name}",
        eval_loss=evaluate(members[0].model, evalset),
        tokens=tokens,
        sent_bytes=group.bytes_sent,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
    )


def shard(setup: Setup, dataset, index: int):
    return dataset.train_batches(index, setup.workers, batch_size=setup.batch_size, seed=setup.seed)


def with_total(inner: InnerConfig, total: int, **changes: int) -> InnerConfig:
    """The shared inner settings with the cosine schedule stretched over `total` steps."""
    return dataclasses.replace(inner, total_steps=total, min_lr=inner.lr / 10, **changes)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    model = GPTConfig()
    dataset = TextDatasetConfig(max_bytes=args.max_bytes, block_size=model.block_size).build()
    evalset = dataset.eval_batches(batch_size=64)
    setup = Setup(
        workers=args.workers,
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        model=model,
        inner=InnerConfig(lr=args.lr, warmup_steps=args.warmup, batch_size=args.batch_size),
        outer=OuterConfig(),
    )
    arms = build_arms(args, setup, dataset, evalset)
    chosen = [a for a in arms if not args.arms or a in args.arms.split(",")]
    n_params = count_parameters(model.build())
    print(
        f"GPT {n_params:,} params (block {model.block_size}, byte-level) on {dataset.num_bytes:,} "
        f"bytes of stdlib sources; {args.workers} workers x {args.steps} inner steps x batch "
        f"{args.batch_size}; AdamW lr {args.lr} (warm-up {args.warmup}, cosine to 10%); "
        f"outer Nesterov lr {setup.outer.lr} momentum {setup.outer.momentum}"
    )
    results = {name: _run_arm(name, arms[name]) for name in chosen}
    figures = report(results, args, n_params, started)
    print(json.dumps(figures, sort_keys=True))
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600, help="inner steps per worker (T)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=4e-4)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--h", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--codecs", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--arms", default="", help="comma-separated subset of arm names to run")
    parser.add_argument("--max-bytes", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def build_arms(
    args: argparse.Namespace, setup: Setup, dataset, evalset
) -> dict[str, Callable[[], ArmResult]]:
    """Every arm by name: data parallel, a single worker (same steps, or as many tokens as all
    workers together), and DiLoCo at each H with each codec."""
    codecs = {name: (lambda name=name: ProtocolCodec(name)) for name in args.codecs}
    arms: dict[str, Callable[[], ArmResult]] = {
        "dp": lambda: run_data_parallel(setup, dataset, evalset),
        "single": lambda: run_single(setup, dataset, evalset, same_tokens=False),
        f"single-{args.workers}x": lambda: run_single(setup, dataset, evalset, same_tokens=True),
    }
    for h in args.h:
        for name in args.codecs:
            arms[f"diloco-{h}-{name}"] = lambda h=h, name=name: run_diloco(
                setup, dataset, evalset, h=h, codec_name=name, codec=codecs[name]
            )
    return arms


def _run_arm(name: str, arm: Callable[[], ArmResult]) -> ArmResult:
    r = arm()
    print(
        f"  {name:<16} eval loss {r.eval_loss:.4f} "
        f"(wall {r.seconds:.0f} s, cpu {r.cpu_seconds:.0f} s)",
        file=sys.stderr,
    )
    return r


def report(
    results: dict[str, ArmResult], args: argparse.Namespace, n_params: int, started: float
) -> dict:
    """Print the table and the target checks; return every figure for the JSON line."""
    dp = results.get("dp")
    row = "{:<16} {:>9} {:>7} {:>10} {:>13} {:>8} {:>6} {:>6}"
    print(
        "\n"
        + row.format("arm", "eval loss", "vs dp", "tokens", "bytes sent", "dp/sent", "wall", "cpu")
    )
    for r in results.values():
        print(
            row.format(
                r.name,
                f"{r.eval_loss:.4f}",
                f"{r.eval_loss / dp.eval_loss:.4f}" if dp else "-",
                f"{r.tokens:,}",
                f"{r.sent_bytes:,}",
                f"{dp.sent_bytes / r.sent_bytes:.0f}x" if dp and r.sent_bytes else "-",
                f"{r.seconds:.0f}s",
                f"{r.cpu_seconds:.0f}s",
            )
        )
    checks = target_checks(results, args.h)
    if checks:
        print("\ntargets: " + ", ".join(f"{k}={v}" for k, v in checks.items()))
    return {
        "arms": {
            r.name: {
                "eval_loss": round(r.eval_loss, 5),
                "vs_dp": round(r.eval_loss / dp.eval_loss, 5) if dp else None,
                "tokens": r.tokens,
                "sent_bytes": r.sent_bytes,
                "seconds": round(r.seconds, 1),
                "cpu_seconds": round(r.cpu_seconds, 1),
            }
            for r in results.values()
        },
        "targets": checks,
        "params": n_params,
        "workers": args.workers,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "inner_lr": args.lr,
        "total_seconds": round(time.perf_counter() - started, 1),
        "total_cpu_seconds": round(time.process_time(), 1),
    }


def target_checks(results: dict[str, ArmResult], hs: list[int]) -> dict[str, float | bool]:
    """Issue 7's targets: H=50 int8+EF within 2% of data parallel and below a single worker;
    int8 within 1% of fp32 at equal H."""
    dp, h50 = results.get("dp"), results.get("diloco-50-int8")
    checks: dict[str, float | bool] = {}
    if dp and h50:
        checks["h50_int8_over_dp"] = round(h50.eval_loss / dp.eval_loss, 4)
        checks["h50_int8_within_2pct_of_dp"] = h50.eval_loss <= 1.02 * dp.eval_loss
        checks["h50_int8_traffic_saving_vs_dp"] = round(dp.sent_bytes / h50.sent_bytes, 1)
    for single in (name for name in results if name.startswith("single")):
        if h50:
            checks[f"h50_int8_below_{single}"] = h50.eval_loss < results[single].eval_loss
    for h in hs:
        int8, fp32 = results.get(f"diloco-{h}-int8"), results.get(f"diloco-{h}-fp32")
        if int8 and fp32:
            checks[f"h{h}_int8_vs_fp32"] = round(int8.eval_loss / fp32.eval_loss - 1, 5)
            checks[f"h{h}_int8_within_1pct_of_fp32"] = (
                abs(int8.eval_loss / fp32.eval_loss - 1) <= 0.01
            )
    return checks


if __name__ == "__main__":
    raise SystemExit(main())
