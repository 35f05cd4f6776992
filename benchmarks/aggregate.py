"""Aggregation time per rule for p = 8 and 16 inputs of 10M and 100M fp32 values.

10M: the inputs are real tensors in memory (16 × 10M fp32 = 640 MB) and go through
`aggregate()`, which walks them in chunks of 1M coordinates.
100M: 16 × 100M fp32 would be 6.4 GB, too much for a shared 24 GiB box, so the inputs are
generated on the fly and go through `aggregate_streaming()`: input i's chunk [a, b) is a view into
one shared 17M-value random pool at an offset that depends on (i, a), so every input and every
chunk differ, and nothing but the 400 MB output buffer and one (p, 1M) stack is ever full-size.
That is the path a receiver would use for updates kept int8 and dequantized a slice at a time.

Baseline, measured in the same run: one "read pass", reading every value of every input once
(chunk by chunk, a sum per slice) and nothing else. Every rule reads its inputs at least twice
(statistics, then output), so the ratio column says how many read passes each rule costs; a read
pass is bound by memory bandwidth.

Threads: 1 by default. This box's 2 cores are shared by several engineers; with 2 torch threads
the OpenMP workers spin against the other load and the same pass was measured 2-10x slower.

    python benchmarks/aggregate.py [--sizes 10M,100M] [--inputs 8,16] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from peertrain.swarm.aggregation import (
    AGGREGATORS,
    DEFAULT_CHUNK_SIZE,
    TensorSource,
    UpdateSource,
    build_aggregator,
)

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

RULE_OPTIONS = {"trimmed-mean": {"f": 2}, "multi-krum": {"f": 2}}  # p = 8 needs 2f + 3 <= p
POOL = 16 * DEFAULT_CHUNK_SIZE
IN_MEMORY_LIMIT = 20_000_000  # above this many values per input, stream generated chunks


@dataclass(frozen=True, slots=True)
class PoolSource:
    """A deterministic pseudo-update: chunk [a, b) is pool[offset(i, a) : offset + b − a]."""

    pool: torch.Tensor  # POOL + chunk values
    index: int
    size: int

    @property
    def numel(self) -> int:
        return self.size

    def read(self, start: int, stop: int) -> torch.Tensor:
        offset = (start // 1024 * 7919 + self.index * 104_729) % POOL
        return self.pool[offset : offset + stop - start]


def make_inputs(p: int, d: int, device: torch.device) -> tuple[list[UpdateSource], bool]:
    gen = torch.Generator(device=device).manual_seed(0)
    if d <= IN_MEMORY_LIMIT:
        centre = torch.randn(d, generator=gen, device=device)
        updates = [centre + torch.randn(d, generator=gen, device=device) for _ in range(p)]
        return [TensorSource(u) for u in updates], False
    pool = torch.randn(POOL + DEFAULT_CHUNK_SIZE, generator=gen, device=device)
    return [PoolSource(pool, i, d) for i in range(p)], True


def read_pass(sources: Sequence[UpdateSource]) -> None:
    """Every value read once, chunk by chunk (a sum per slice): the floor for any one pass."""
    d = sources[0].numel
    for start in range(0, d, DEFAULT_CHUNK_SIZE):
        stop = min(start + DEFAULT_CHUNK_SIZE, d)
        for source in sources:
            source.read(start, stop).sum()


def best_time(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [int(float(s.rstrip("M")) * 1_000_000) for s in args.sizes.split(",")]
    counts = [int(p) for p in args.inputs.split(",")]
    seconds: dict[str, float] = {}
    rows: list[list[object]] = []
    for d in sizes:
        for p in counts:
            rows += time_rules(p, d, device, args.repeats, seconds)
    peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    _print_report(device, rows, seconds, peak_rss_gb)
    print_json(
        {
            "benchmark": "aggregate",
            "device": str(device),
            "threads": torch.get_num_threads(),
            "chunk_size": DEFAULT_CHUNK_SIZE,
            "seconds": seconds,
            "peak_rss_gb": round(peak_rss_gb, 2),
            "streamed_sizes": [d for d in sizes if d > IN_MEMORY_LIMIT],
        }
    )


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10M,100M")
    parser.add_argument("--inputs", default="8,16")
    parser.add_argument("--repeats", type=int, default=3, help="best of N (streamed sizes: 1)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    return parser.parse_args()


def time_rules(
    p: int, d: int, device: torch.device, repeats: int, seconds: dict[str, float]
) -> list[list[object]]:
    """One read pass, then every rule, over `p` inputs of `d` values; times go into `seconds`,
    one table row per rule comes back."""
    sources, streamed = make_inputs(p, d, device)
    repeats = 1 if streamed else repeats
    out = torch.empty(d, device=device)
    base = best_time(lambda s=sources: read_pass(s), repeats, device)
    label = f"{d // 1_000_000}M"
    seconds[f"read-pass/p{p}/{label}"] = round(base, 4)
    rows: list[list[object]] = []
    for rule in sorted(AGGREGATORS):
        agg = build_aggregator(rule, **RULE_OPTIONS.get(rule, {}))
        if streamed:
            call = lambda a=agg, s=sources, o=out: a.aggregate_streaming(s, out=o)  # noqa: E731
        else:
            tensors = [s.tensor for s in sources]  # type: ignore[attr-defined]
            call = lambda a=agg, t=tensors, o=out: a.aggregate(t, out=o)  # noqa: E731
        elapsed = best_time(call, repeats, device)
        seconds[f"{rule}/p{p}/{label}"] = round(elapsed, 4)
        gbps = p * d * 4 / elapsed / 1e9
        mode = "streamed" if streamed else "in memory"
        rows.append([label, p, mode, rule, elapsed, elapsed / base, gbps])
    return rows


def _print_report(
    device: torch.device, rows: list[list[object]], seconds: dict[str, float], peak_rss_gb: float
) -> None:
    print_table(
        f"aggregation time on {device} ({torch.get_num_threads()} threads); ratio = seconds / "
        "one read pass over the same inputs; GB/s = input bytes / seconds",
        ["d", "p", "inputs", "rule", "seconds", "x read pass", "GB/s"],
        rows,
    )
    base_keys = [k for k in seconds if k.startswith("read-pass")]
    print(
        "read pass (baseline):",
        ", ".join(f"{k.split('/', 1)[1]} {seconds[k]:.3f} s" for k in base_keys),
    )
    print(f"peak RSS {peak_rss_gb:.2f} GB")


if __name__ == "__main__":
    main()
