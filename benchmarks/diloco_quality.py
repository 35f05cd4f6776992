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
    LocalGroup,
    OuterConfig,
    ProtocolCodec,
    UpdateCodec,
    data_parallel_bytes,
    evaluate,
)
from peertrain.swarm.models import GPTConfig, count_parameters


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
    seconds: float


def run_data_parallel(setup: Setup, dataset, evalset) -> ArmResult:
    started = time.perf_counter()
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
    )


def run_single(setup: Setup, dataset, evalset, *, same_tokens: bool) -> ArmResult:
    started = time.perf_counter()
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
    )


def run_diloco(
    setup: Setup, dataset, evalset, *, h: int, codec_name: str, codec: Callable[[], UpdateCodec]
) -> ArmResult:
    started = time.perf_counter()
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
    )


def shard(setup: Setup, dataset, index: int):
    return dataset.train_batches(index, setup.workers, batch_size=setup.batch_size, seed=setup.seed)


def with_total(inner: InnerConfig, total: int, **changes) -> InnerConfig:
    fields = {f: getattr(inner, f) for f in inner.__dataclass_fields__}
    return InnerConfig(**{**fields, "total_steps": total, "min_lr": inner.lr / 10, **changes})


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
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
    chosen = [a for a in arms if not args.arms or a in args.arms.split(",")]
    n_params = count_parameters(model.build())
    print(
        f"GPT {n_params:,} params, block {model.block_size}; corpus {dataset.num_bytes:,} bytes "
        f"(stdlib sources); {args.workers} workers x {args.steps} steps x batch {args.batch_size}; "
        f"inner AdamW lr {args.lr}; outer Nesterov lr 0.7 m 0.9"
    )

    results: dict[str, ArmResult] = {}
    skipped: dict[str, str] = {}
    for name in chosen:
        try:
            results[name] = arms[name]()
        except (ImportError, NotImplementedError) as exc:
            skipped[name] = str(exc)
            print(f"  {name}: skipped: {exc}", file=sys.stderr)
            continue
        print(
            f"  {name:<16} eval loss {results[name].eval_loss:.4f} ({results[name].seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    figures = report(results, skipped, args)
    print(json.dumps(figures, sort_keys=True))
    return 0


def report(results: dict[str, ArmResult], skipped: dict[str, str], args) -> dict:
    dp = results.get("dp")
    header = ("arm", "eval loss", "vs dp", "tokens", "sent", "dp/sent", "time")
    print("\n{:<16} {:>9} {:>7} {:>10} {:>12} {:>8} {:>6}".format(*header))
    for r in results.values():
        ratio = f"{r.eval_loss / dp.eval_loss:.4f}" if dp else "-"
        saving = f"{dp.sent_bytes / r.sent_bytes:.0f}x" if dp and r.sent_bytes else "-"
        print(
            f"{r.name:<16} {r.eval_loss:>9.4f} {ratio:>7} {r.tokens:>10,} {r.sent_bytes:>12,} "
            f"{saving:>8} {r.seconds:>5.0f}s"
        )
    for name, why in skipped.items():
        print(f"{name:<16} skipped: {why}")

    figures: dict = {
        "arms": {
            r.name: {
                "eval_loss": round(r.eval_loss, 5),
                "tokens": r.tokens,
                "sent_bytes": r.sent_bytes,
                "seconds": round(r.seconds, 1),
            }
            for r in results.values()
        },
        "skipped": skipped,
        "workers": args.workers,
        "steps": args.steps,
    }
    target, fp32 = results.get("diloco-50-int8"), results.get("diloco-50-fp32")
    checks = {}
    if dp and target:
        checks["h50_int8_over_dp"] = round(target.eval_loss / dp.eval_loss, 4)
        checks["h50_int8_le_1.02_dp"] = target.eval_loss <= 1.02 * dp.eval_loss
    if target and "single" in results:
        checks["h50_int8_below_single"] = target.eval_loss < results["single"].eval_loss
    for h in args.h:
        a, b = results.get(f"diloco-{h}-int8"), results.get(f"diloco-{h}-fp32")
        if a and b:
            checks[f"h{h}_int8_vs_fp32"] = round(a.eval_loss / b.eval_loss - 1, 5)
            checks[f"h{h}_int8_within_1pct"] = abs(a.eval_loss / b.eval_loss - 1) <= 0.01
    if dp and target:
        checks["h50_int8_bytes_saving_vs_dp"] = round(dp.sent_bytes / target.sent_bytes, 1)
    if checks:
        print("\ntargets: " + ", ".join(f"{k}={v}" for k, v in checks.items()))
    figures["targets"] = checks
    _ = fp32
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
