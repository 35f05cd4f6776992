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
        ["arm", "strategy", "FID", "classes covered", "class TV", "sample s"],
        [
            [
                r["arm"],
                r["strategy"],
                r["fid"],
                r["classes_covered"],
                r["class_tv"],
                r["sample_seconds"],
            ]
            for r in rows
        ],
    )
    accuracy = result["router_accuracy"]
    print_table(
        "\nRouter (feature clusters) top-1 accuracy on held-out images noised to t "
        f"(chance {1 / setup.experts:.2f})",
        ["t", "accuracy", "mean top probability"],
        [[t, a, result["router_confidence"][t]] for t, a in accuracy.items()],
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
        "class_tv": {f"{r['arm']}/{r['strategy']}": r["class_tv"] for r in result["rows"]},
        "router_accuracy": result["router_accuracy"],
        "router_confidence": result["router_confidence"],
        "monolith_loss": result["monolith_loss"],
        "feature": arm(result["feature"]),
        "random": arm(result["random"]),
        "targets": checks,
        "seconds": result["seconds"],
    }
