"""Codec throughput against a memcpy of the same tensor, measured in the same run.

    .venv/bin/python benchmarks/codec.py [--numel 100000000] [--repeat 7] [--threads N]

For every codec: encode (fp32 tensor -> payload, into a preallocated payload) and decode
(payload -> fp32 tensor, into a preallocated tensor), in fp32 bytes per second. The baseline
is `dst.copy_(src)` of the same fp32 tensor into a preallocated tensor (a memcpy at memory
bandwidth; `clone()` is slower, since it also allocates and faults in fresh pages). Every
round times every operation once, in turn, and the figures are each operation's best round,
so a neighbour's burst of load hits all operations alike. "cpu" columns are process CPU time
(all threads), which waiting for a busy core does not inflate. Also shown: int8 encode with error
feedback, and the blake3 hash of the int8 payload (what tensor transfer adds).

Target (issue 3): int8 encode >= 50% of memcpy for 100M floats. Prints a table, then, as the
last line, one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from peertrain.protocol import codecs
from peertrain.protocol.error_feedback import ErrorFeedback
from peertrain.protocol.int8_blockwise import DEFAULT_BLOCK_SIZE
from peertrain.protocol.tensors import blake3_digest


def _ops(x: torch.Tensor, block_size: int) -> dict[str, callable]:
    numel = x.numel()
    dst = torch.empty_like(x)
    ops = {"memcpy (copy_)": lambda: dst.copy_(x)}
    for name, codec in codecs.CODECS.items():
        payload = torch.empty(codec.payload_nbytes(numel, block_size), dtype=torch.uint8)
        codecs.encode(x, name, block_size=block_size, out=payload)
        out = torch.empty_like(x)
        ops[f"{name} encode"] = lambda n=name, p=payload: codecs.encode(
            x, n, block_size=block_size, out=p
        )
        ops[f"{name} decode"] = lambda n=name, p=payload, o=out: codecs.decode(
            p, n, dtype="float32", shape=(numel,), block_size=block_size, out=o
        )
        if name == "int8":
            feedback = ErrorFeedback(block_size=block_size)
            ops["int8 encode + error feedback"] = lambda p=payload, f=feedback: f.encode(
                "x", x, out=p
            )
            ops["blake3 of int8 payload"] = lambda p=payload: blake3_digest(p.numpy())
    return ops


def measure(numel: int, repeat: int, block_size: int) -> dict[str, dict[str, float]]:
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    ops = _ops(x, block_size)
    times: dict[str, list[float]] = {name: [] for name in ops}
    cpu: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(repeat):
        for name, op in ops.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            op()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    fp32_bytes = numel * 4
    memcpy, memcpy_cpu = min(times["memcpy (copy_)"]), min(cpu["memcpy (copy_)"])
    return {
        name: {
            "best_s": min(t),
            "median_s": statistics.median(t),
            "gb_per_s": fp32_bytes / min(t) / 1e9,
            "vs_memcpy": memcpy / min(t),
            "cpu_s": min(cpu[name]),
            "cpu_vs_memcpy": memcpy_cpu / max(min(cpu[name]), 1e-9),
        }
        for name, t in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=100_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = measure(args.numel, args.repeat, args.block_size)
    print(
        f"{args.numel:,} fp32 values ({args.numel * 4 / 1e6:,.0f} MB),"
        f" block size {args.block_size}, {torch.get_num_threads()} torch threads,"
        f" best of {args.repeat} interleaved rounds"
    )
    print(
        f"{'operation':<30} {'best ms':>8} {'median ms':>10} {'fp32 GB/s':>10} {'vs memcpy':>10}"
        f" {'cpu ms':>8} {'cpu vs memcpy':>14}"
    )
    for name, r in results.items():
        print(
            f"{name:<30} {r['best_s'] * 1e3:>8.1f} {r['median_s'] * 1e3:>10.1f}"
            f" {r['gb_per_s']:>10.2f} {r['vs_memcpy']:>10.0%}"
            f" {r['cpu_s'] * 1e3:>8.1f} {r['cpu_vs_memcpy']:>14.0%}"
        )
    ratio = results["int8 encode"]["vs_memcpy"]
    verdict = "meets" if ratio >= 0.5 else "MISSES"
    print(f"int8 encode runs at {ratio:.0%} of memcpy: {verdict} the >= 50% target")
    figures = {
        "numel": args.numel,
        "block_size": args.block_size,
        "threads": torch.get_num_threads(),
        "int8_encode_vs_memcpy": round(ratio, 3),
        "int8_encode_cpu_vs_memcpy": round(results["int8 encode"]["cpu_vs_memcpy"], 3),
        **{
            name.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "plus")
            + "_gb_per_s": round(r["gb_per_s"], 3)
            for name, r in results.items()
        },
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
