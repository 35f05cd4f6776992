"""Fuzz every protocol handler and the control API with structure-aware inputs.

    .venv/bin/python benchmarks/fuzz.py [--inputs 100000] [--seed 0] [--only dht]

For each of the node's handlers (peertrain.testing.fuzz_targets: DHT, CRDT gossip and sync,
update gossip, tensors, RPC, peer exchange, dial-back, control API), `--inputs` mutations of real
encoded messages (peertrain.testing.fuzzing: byte and msgpack/JSON-level, some re-signed by a
stranger) go to the real decode and handle entry points, in-process. Reported per handler:
inputs, refused (the handler's documented refusal), crashes (target 0), hangs (an input over
`--per-input` s of CPU; target 0), the slowest input's CPU time, and RSS growth after a
warm-up tenth and over the second half alone (target: flat; growth that goes on shows there).
The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import logging

import trio


async def fuzz(args) -> list:
    from peertrain.testing.fuzz_targets import open_targets
    from peertrain.testing.fuzzing import run_target

    results = []
    async with open_targets() as targets:
        for target in targets:
            if args.only and target.name not in args.only:
                continue
            result = await run_target(
                target, inputs=args.inputs, seed=args.seed, per_input=args.per_input
            )
            print(
                f"{result.name:16}{result.inputs:>10}{result.refused:>10}{result.crashes:>9}"
                f"{result.hangs:>7}{result.slowest_ms:>12}{result.seconds:>10}"
                f"{result.rss_growth_mib:>10}{result.rss_growth_late_mib:>10}",
                flush=True,
            )
            if result.first_crash:
                print(f"  first crash: {result.first_crash}")
            results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-input", type=float, default=1.0)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # penalties and refusals by the hundred thousand
    head = ("handler", "inputs", "refused", "crashes", "hangs", "CPU ms max", "seconds", "RSS MiB")
    head += ("2nd half",)
    widths = (16, 10, 10, 9, 7, 12, 10, 10, 10)
    print(
        f"{head[0]:{widths[0]}}"
        + "".join(f"{h:>{w}}" for h, w in zip(head[1:], widths[1:], strict=True))
    )
    results = trio.run(fuzz, args)
    summary = {
        "inputs_per_handler": args.inputs,
        "handlers": {
            r.name: {
                "inputs": r.inputs,
                "refused": r.refused,
                "crashes": r.crashes,
                "hangs": r.hangs,
                "slowest_ms": r.slowest_ms,
                "seconds": r.seconds,
                "rss_growth_mib": r.rss_growth_mib,
                "rss_growth_second_half_mib": r.rss_growth_late_mib,
            }
            for r in results
        },
        "crashes": sum(r.crashes for r in results),
        "hangs": sum(r.hangs for r in results),
        "max_rss_growth_mib": max((r.rss_growth_mib for r in results), default=0.0),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
