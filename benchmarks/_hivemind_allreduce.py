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

Imported by update_round.py (stdlib only at the top, so it loads without hivemind): the arm's
runner and its rows of the summary table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HIVEMIND_RATIO = 5.0  # issue 20: our round at least 5x faster than hivemind's 8-bit all-reduce


# hivemind's all-reduce of 4 x 100M as the user measured it (issue 20), printed when the
# `--hivemind` arm does not run
HIVEMIND_USER = {"8bit_best_s": 8.67, "8bit_median_s": 14.2, "fp32_s": 12.3, "numel": 100_000_000}
HIVEMIND_ARMS = {  # keys of the --hivemind arm's figures
    "8bit": "8-bit all-reduce",
    "8bit_step": "8-bit step() (matchmaking + all-reduce)",
    "fp32": "fp32 all-reduce",
    "fp32_step": "fp32 step()",
}


def hivemind_arm(python: str | None, *, numel: int, peers: int, rounds: int) -> dict[str, Any]:
    """For update_round.py: this script of the same size under `python` (its `--hivemind`),
    8-bit and fp32; without one, the user's measurement of 4 x 100M, labelled as such."""
    user = {
        "measured": False,
        "8bit": [HIVEMIND_USER["8bit_best_s"], HIVEMIND_USER["8bit_median_s"]],
        "fp32": [HIVEMIND_USER["fp32_s"]],
        "why": "the user's figure for 4 x 100M (issue 20), not measured in this run",
    }
    if python is None:
        return user if (peers, numel) == (4, HIVEMIND_USER["numel"]) else {}
    out: dict[str, Any] = {"measured": True}
    script = Path(__file__).resolve()
    for codec in ("8bit", "fp32"):
        command = [python, str(script), "--numel", str(numel), "--peers", str(peers)]
        command += ["--codec", codec, "--rounds", str(rounds)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        answer = json.loads(lines[-1]) if lines else {"error": done.stderr[-500:]}
        if "error" in answer:
            print(f"hivemind arm ({codec}) did not run: {answer['error']}")
            return user | {"why": f"{user['why']}; {answer['error'][:200]}"}
        out[codec], out[f"{codec}_step"] = answer["seconds"], answer["step_seconds"]
    return out


def hivemind_rows(f: dict[str, Any], hm: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The summary rows of the hivemind arm beside our round (`f`: its figures)."""
    where = "measured in this run" if hm.get("measured") else hm.get("why", "")
    rows = []
    for key, what in HIVEMIND_ARMS.items():
        if hm.get(key):
            runs = hm[key]
            note = f"best {min(runs):.2f} s of {len(runs)}; {where}"
            rows.append((f"hivemind {what}, median", statistics.median(runs), note))
    verdict = "met" if f["hivemind_met"] else "NOT met"
    note = f"median to median; target >= {HIVEMIND_RATIO}x: {verdict}"
    rows.append(("hivemind 8-bit all-reduce / our round", f["hivemind_ratio"], note))
    if hm.get("8bit_step"):
        ratio = statistics.median(hm["8bit_step"]) / f["round_s"]
        rows.append(("hivemind 8-bit step() / our round", ratio, "median to median"))
    return rows


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
