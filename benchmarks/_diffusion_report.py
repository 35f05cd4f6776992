"""Tables and the JSON figures of benchmarks/diffusion_quality.py (split from the runner so
each reads on its own: the runner trains and samples, this says what came of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from benchmarks._report import print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_table


def report(result: dict, setup: Any, out_dir: Path, strategies: Sequence[str]) -> dict:
    """Print the tables; the figures for the JSON line (`setup`: the run's Setup)."""
    rows = result["rows"]
    print_table(
        f"\nSample quality ({setup.samples} samples; FID in the 64-d feature space of a small CNN "
        "classifier trained on the same data; lower is better)",
        ["arm", "strategy", "FID", "FID 95%", "classes covered", "class TV", "cluster TV", "s"],
        [
            [
                r["arm"],
                r["strategy"],
                r["fid"],
                "{:.2f}–{:.2f}".format(*r["fid_interval"]),
                r["classes_covered"],
                r["class_tv"],
                r["cluster_tv"],
                r["sample_seconds"],
            ]
            for r in rows
        ],
    )
    print(
        "FID 95%: ± 1.96 bootstrap sd over the samples. Cluster TV: the samples' spread over the "
        "feature clusters vs the data's.",
        flush=True,
    )
    router = result["router"]
    print_table(
        "\nRouter (feature clusters) on held-out images noised to t "
        f"(chance {1 / setup.experts:.2f}); Sample-1 leaves the top expert with probability "
        "1 − top probability",
        ["t", "accuracy", "mean top probability", "accuracy − confidence"],
        [[t, r["accuracy"], r["top_probability"], r["gap"]] for t, r in router.items()],
    )
    separation = result["separation"]
    print(
        f"Feature clusters: mean own/nearest-other centroid distance "
        f"{separation['mean_ratio']:.3f}, border share (ratio > 0.9) "
        f"{separation['border_share']:.3f}",
        flush=True,
    )
    fid = {f"{r['arm']}/{r['strategy']}": r["fid"] for r in rows}
    checks = {
        "top1_experts_le_monolith": fid["feature/top1"] <= fid["monolith/-"],
        "feature_better_than_random": fid["feature/top1"] < fid["random/top1"],
        "sample1_worst_of_feature_strategies": fid["feature/sample1"]
        == max(fid[f"feature/{s}"] for s in strategies),
    }
    print_table("\nTargets (issue 16)", ["target", "met"], [[k, v] for k, v in checks.items()])
    print(f"\nSample grids: {out_dir}/monolith.png and <arm>-<strategy>.png", flush=True)
    return _figures(result, setup, fid, checks)


def _figures(result: dict, setup: Any, fid: dict, checks: dict) -> dict:
    def arm(trained: dict) -> dict:
        keys = ("expert_losses", "cluster_sizes", "router_loss", "expert_seconds", "router_seconds")
        return {k: trained[k] for k in keys}

    return {
        "benchmark": "diffusion_quality",
        "dataset": result["dataset"],
        "metric": "FID in the feature space of a small CNN classifier trained on the same data",
        "experts": setup.experts,
        "steps": setup.steps,
        "expert_batch": setup.batch_size,
        "monolith_batch": setup.experts * setup.batch_size,
        "samples": setup.samples,
        "sampler": f"{setup.sampler.method}-{setup.sampler.steps}",
        "partition_digest": result["partition_digest"],
        "fid": fid,
        "coverage": {f"{r['arm']}/{r['strategy']}": r["classes_covered"] for r in result["rows"]},
        "fid_interval": {
            f"{r['arm']}/{r['strategy']}": [round(x, 2) for x in r["fid_interval"]]
            for r in result["rows"]
        },
        "class_tv": {f"{r['arm']}/{r['strategy']}": r["class_tv"] for r in result["rows"]},
        "cluster_tv": {f"{r['arm']}/{r['strategy']}": r["cluster_tv"] for r in result["rows"]},
        "router_accuracy": {t: r["accuracy"] for t, r in result["router"].items()},
        "router_confidence": {t: r["top_probability"] for t, r in result["router"].items()},
        "separation": result["separation"],
        "monolith_loss": result["monolith_loss"],
        "feature": arm(result["feature"]),
        "random": arm(result["random"]),
        "targets": checks,
        "seconds": result["seconds"],
    }
