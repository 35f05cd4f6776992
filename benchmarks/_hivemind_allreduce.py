"""hivemind's all-reduce of the same size, for benchmarks/update_round.py's `--hivemind` arm.

Run by that benchmark with an interpreter that has hivemind (it pins protobuf and grpc versions
that conflict with our libp2p, so it usually lives in a venv of its own). N peers on loopback,
each a hivemind DHT + DecentralizedAverager (its own process, hivemind's default settings) over
one tensor of `numel` fp32 values. Two times per round: "seconds", the all-reduce alone (every
step waits at `require_trigger` once matched: from the common trigger until every peer holds the
average), and "step_seconds", the whole `step()` a hivemind user waits for (matchmaking, whose
`min_matchmaking_time` is 5 s by default, then the all-reduce). Prints one JSON line: {"codec",
"numel", "peers", "seconds": [...], "step_seconds": [...]}; exit 3 without hivemind.

    python _hivemind_allreduce.py --numel N --peers 4 --rounds 3 --codec 8bit|fp32
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--numel", type=int, default=100_000_000)
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--codec", choices=("8bit", "fp32"), default="8bit")
    parser.add_argument("--timeout", type=float, default=300.0)
    return parser.parse_args()


def _peers(args, hivemind, torch):
    from hivemind.compression import NoCompression, Uniform8BitQuantization

    compression = Uniform8BitQuantization() if args.codec == "8bit" else NoCompression()
    first = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    dhts = [first] + [
        hivemind.DHT(
            start=True,
            host_maddrs=["/ip4/127.0.0.1/tcp/0"],
            initial_peers=first.get_visible_maddrs(),
        )
        for _ in range(args.peers - 1)
    ]
    averagers = []
    for k, dht in enumerate(dhts):
        tensor = torch.randn(args.numel, generator=torch.Generator().manual_seed(k))
        averagers.append(
            hivemind.averaging.DecentralizedAverager(
                [tensor],
                dht,
                prefix="bench",
                target_group_size=args.peers,
                min_group_size=args.peers,
                request_timeout=10.0,
                compression=compression,
                start=True,
            )
        )
    return dhts, averagers


def _one_round(averagers, timeout: float) -> tuple[float, float]:
    """(all-reduce seconds, step seconds) of one round on every peer."""
    from hivemind.averaging.control import AveragingStage

    called = time.perf_counter()
    controls = [a.step(wait=False, require_trigger=True, timeout=timeout) for a in averagers]
    deadline = time.monotonic() + timeout
    while not all(c.stage == AveragingStage.AWAITING_TRIGGER for c in controls):
        if time.monotonic() > deadline or any(c.done() for c in controls):
            raise RuntimeError("hivemind matchmaking did not form the group")
        time.sleep(0.01)
    start = time.perf_counter()
    for control in controls:
        control.allow_allreduce()
    for control in controls:
        if control.result(timeout=timeout) is None:
            raise RuntimeError("a hivemind all-reduce failed")
    end = time.perf_counter()
    return end - start, end - called


def main() -> None:
    args = _arguments()
    try:
        import hivemind
        import torch
    except ImportError as exc:
        print(json.dumps({"error": f"hivemind is not importable here: {exc}"}))
        sys.exit(3)
    dhts, averagers = _peers(args, hivemind, torch)
    try:
        rounds = [_one_round(averagers, args.timeout) for _ in range(args.rounds)]
    finally:
        for averager in averagers:
            averager.shutdown()
        for dht in dhts:
            dht.shutdown()
    print(json.dumps({"codec": args.codec, "numel": args.numel, "peers": args.peers,
                      "seconds": [r[0] for r in rounds],
                      "step_seconds": [r[1] for r in rounds]}))  # fmt: skip


if __name__ == "__main__":
    main()
