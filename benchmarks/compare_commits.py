"""The same benchmarks on two commits, in one run: did a change make anything slower?

A restructuring moves code, not behaviour, and must not cost speed; "before" figures from
another day on another load prove nothing. This runs each benchmark script of each commit,
alternating (before, after, before, after, ...), so both see the same machine and the same
load, and compares the median of every figure their last-line JSON objects share.

The before commit is checked out into a temporary git worktree laid out as a `peertrain`
package (the repository root is the package), and runs with that folder first on PYTHONPATH;
so each commit runs its own benchmark script against its own code. Nothing is installed.

    python benchmarks/compare_commits.py --before REV [--after HEAD] [--repeats 2]
        [--bench "stream.py --mib 64 --repeats 2" --bench "dht.py --sizes 16 32 --ops 50" ...]

A figure is reported as after / before. Which direction is better depends on the figure (a
time wants less, a throughput more); the table says the ratio and leaves the reading to the
name. The last line is one JSON object: per benchmark, per figure, before, after and ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _report import print_json, print_table  # noqa: E402

DEFAULT_BENCHES = [
    "stream.py --mib 64 --repeats 2",
    "dht.py --sizes 16 32 --ops 50",
    "update_round.py --numel 20000000 --peers 4",
]


def numbers(value, prefix: str = "") -> dict[str, float]:
    """Every numeric leaf of a JSON object, by its dotted path (lists by index)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    items = value.items() if isinstance(value, dict) else enumerate(value or [])
    out: dict[str, float] = {}
    if isinstance(value, dict | list):
        for key, inner in items:
            out |= numbers(inner, f"{prefix}.{key}" if prefix else str(key))
    return out


def run_once(root: Path, bench: str, python: str) -> dict[str, float]:
    """One run of `bench` (a script of root's benchmarks/ and its arguments) on root's code."""
    script, *args = shlex.split(bench)
    env = dict(os.environ, PYTHONPATH=str(root.parent))
    done = subprocess.run(
        [python, str(root / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=1800,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{bench} on {root} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return numbers(json.loads(lines[-1]))


def worktree(repo: Path, rev: str, into: Path) -> Path:
    """`rev` checked out at into/peertrain (the package's name), detached."""
    root = into / "peertrain"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(root), rev],
                   check=True)  # fmt: skip
    return root


def compare(before: list[dict], after: list[dict]) -> dict[str, dict[str, float]]:
    shared = set.intersection(*(set(r) for r in before + after))
    out = {}
    for key in sorted(shared):
        b = statistics.median(r[key] for r in before)
        a = statistics.median(r[key] for r in after)
        out[key] = {"before": b, "after": a, "ratio": a / b if b else float("nan")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--bench", action="append", help="script and arguments; repeatable")
    args = parser.parse_args()
    repo = HERE.parent
    load = os.getloadavg()[0]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="peertrain-compare-") as tmp:
        sides = {
            side: worktree(repo, rev, Path(tmp) / side)
            for side, rev in (("before", args.before), ("after", args.after))
        }
        try:
            for bench in args.bench or DEFAULT_BENCHES:
                runs: dict[str, list] = {"before": [], "after": []}
                for _ in range(args.repeats):
                    for side, root in sides.items():
                        runs[side].append(run_once(root, bench, sys.executable))
                results[bench] = compare(runs["before"], runs["after"])
                rows = [(k, v["before"], v["after"], v["ratio"]) for k, v in results[bench].items()]
                print_table(f"{bench}  (median of {args.repeats})", ("figure", "before", "after",
                            "after/before"), rows)  # fmt: skip
        finally:
            for root in sides.values():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(root)],
                               check=False)  # fmt: skip
    print(f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print_json({"before": args.before, "after": args.after, "load_start": load,
                "load_end": os.getloadavg()[0], "benchmarks": results})  # fmt: skip


if __name__ == "__main__":
    main()
