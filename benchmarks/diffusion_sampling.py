"""`peertrain sample` from experts fetched over the network vs. with the weights already local.

Three daemons train a diffusion run (K = 2 experts and the router, digits, dit-tiny) for one
round; a fourth node, outside the run, then runs the real CLI command

    peertrain sample --run bench --n 64 --steps 50 --strategy top1 --out grid.png

alternately as a node that never sampled (`--fresh`: every group's state is downloaded from the
members through the tensor service) and with the states already in its cache (nothing
downloaded). Both arms pay the same CLI start, run lookup, RunState pull and sampling; the
difference is the download ("sampling s": the daemon's own time drawing the images, the compute
floor of both). Arms alternate (fetched, local, fetched, …) so load drift hits both; the figure
is the ratio of medians, target ≤ 2.

Usage: python benchmarks/diffusion_sampling.py [--repeats 3] [--n 64] [--steps 50]
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import cli_json

try:
    from benchmarks._report import print_json, print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table

RUN = "bench"
SPEC = ["--mode", "diffusion", "--experts", "2", "--dataset", "digits", "--model", "dit-tiny",
        "--inner-steps", "5", "--batch-size", "16", "--rounds", "1"]  # fmt: skip


def train(base: Path) -> tuple[list[DaemonProcess], DaemonProcess]:
    """Three members that finish one round, and a stranger connected to the first."""
    first = DaemonProcess(base / "m0", node_args(), DAEMON_ENV).start()
    addr = first.wait_ready()["share"]
    rest = [
        DaemonProcess(base / name, node_args(bootstrap=[addr]), DAEMON_ENV).start()
        for name in ("m1", "m2", "stranger")
    ]
    for daemon in rest:
        daemon.wait_ready()
    *members, stranger = [first, *rest]
    cli_json("run", "create", "--home", str(first.home), "--name", RUN, *SPEC)
    for member in members[1:]:
        _wait(lambda: (first.status()["run"] or {}).get("groups"), 300)
        known = sum(len(g["members"]) for g in first.status()["run"]["groups"].values())
        cli_json("run", "join", "--home", str(member.home), "--run", RUN)
        _wait(lambda k=known: _members(first) > k, 300)
    _wait(lambda: all((m.status()["run"] or {}).get("finished") for m in members), 600)
    return members, stranger


def _members(daemon: DaemonProcess) -> int:
    return sum(len(g["members"]) for g in daemon.status()["run"]["groups"].values())


def _wait(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - a busy daemon: asked again
            pass
        time.sleep(0.5)
    raise TimeoutError("the run did not get there in time")


def sample_once(stranger: DaemonProcess, out: Path, args, *, fresh: bool) -> dict:
    flags = ["--fresh"] if fresh else []
    started = time.perf_counter()
    result = cli_json(
        "sample", "--home", str(stranger.home), "--run", RUN, "--n", str(args.n),
        "--steps", str(args.steps), "--strategy", "top1", "--out", str(out), *flags,
    )  # fmt: skip
    return {**result, "wall_s": time.perf_counter() - started}


def rows_of(rows: list[tuple[bool, dict]]) -> list[dict]:
    return [r for _, r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="peertrain-sampling-") as tmp:
        base = Path(tmp)
        started = time.monotonic()
        members, stranger = train(base)
        print(f"run trained in {time.monotonic() - started:.0f} s", flush=True)
        try:
            sample_once(stranger, base / "warm.png", args, fresh=True)  # imports, caches
            rows = []
            for i in range(args.repeats):
                for fresh in (True, False):
                    rows.append(
                        (fresh, sample_once(stranger, base / f"s{i}.png", args, fresh=fresh))
                    )
        finally:
            stop_all([*members, stranger])
    fetched = [r for fresh, r in rows if fresh]
    local = [r for fresh, r in rows if not fresh]
    print_table(
        f"peertrain sample --n {args.n} --steps {args.steps} (top1) on a node outside the run",
        ["arm", "wall s (median)", "in daemon s", "sampling s", "bytes fetched"],
        [
            [name, statistics.median(r["wall_s"] for r in arm),
             statistics.median(r["seconds"] for r in arm),
             statistics.median(r["sample_seconds"] for r in arm), arm[0]["bytes_fetched"]]
            for name, arm in (("fetched", fetched), ("local", local))
        ],
    )  # fmt: skip
    ratio = statistics.median(r["wall_s"] for r in fetched) / statistics.median(
        r["wall_s"] for r in local
    )
    print(f"fetched / local: {ratio:.2f} (target ≤ 2)")
    print_json(
        {
            "benchmark": "diffusion_sampling",
            "n": args.n,
            "steps": args.steps,
            "repeats": args.repeats,
            "fetched_wall_s": [r["wall_s"] for r in fetched],
            "local_wall_s": [r["wall_s"] for r in local],
            "fetched_bytes": fetched[0]["bytes_fetched"],
            "local_bytes": local[0]["bytes_fetched"],
            "sampling_s": statistics.median(r["sample_seconds"] for r in rows_of(rows)),
            "ratio_fetched_over_local": ratio,
            "target_met": ratio <= 2.0,
        }
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
