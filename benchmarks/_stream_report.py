"""The stream benchmark's report: medians per arm, a table, the targets, the JSON figures."""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

try:
    from benchmarks._report import print_table
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_table

TARGET_MBPS = 500.0  # issue 3
TARGET_OF_AEAD = 0.65  # issue 20: ours >= 0.65 x ChaCha20-Poly1305 alone on one core


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    keys = ("MBps", "rx_cpu", "tx_cpu", "cpu_MBps")
    out = {arm: {k: statistics.median(r[k] for r in rs) for k in keys} for arm, rs in runs.items()}
    for arm, rs in runs.items():
        out[arm]["min"] = min(r["MBps"] for r in rs)
        out[arm]["max"] = max(r["MBps"] for r in rs)
    return out


def print_report(
    args: argparse.Namespace,
    runs: dict[str, list[dict[str, Any]]],
    med: dict[str, dict[str, float]],
    load: tuple[float, float],
) -> None:
    tcp = med["tcp"]["MBps"] if "tcp" in med else None
    rows = [
        (
            arm,
            len(runs[arm]),
            m["MBps"],
            m["min"],
            m["max"],
            f"{m['MBps'] / tcp:.2f}" if tcp else "-",
            m["rx_cpu"],
            m["tx_cpu"],
            m["cpu_MBps"],
            all(r["ok"] for r in runs[arm]),
        )
        for arm, m in med.items()
    ]
    header = ["arm", "n", "MB/s", "min", "max", "vs tcp", "rx CPU s", "tx CPU s", "MB/CPU-s", "ok"]
    title = f"{args.mib} MiB over one stream in {args.chunk_mib:g} MiB writes, two processes"
    print_table(title + " (medians)", header, rows)
    print(f"load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} CPUs")
    ours = med["ours"]["MBps"] if "ours" in med else None
    if ours is not None:
        verdict = "met" if ours >= TARGET_MBPS else "NOT met"
        print(f"target: ours >= {TARGET_MBPS:.0f} MB/s: {verdict}")
        if "default" in med:
            print(f"ours vs py-libp2p default: {ours / med['default']['MBps']:.1f}x")
    if (vs := _versus_cipher(runs, med)) is not None:
        verdict = "met" if vs["vs_aead"] >= TARGET_OF_AEAD else "NOT met"
        print(
            f"aead alone, one core: seal {vs['aead_seal_MBps']:.0f} MB/s, open"
            f" {vs['aead_open_MBps']:.0f} MB/s, both {med['aead']['MBps']:.0f} MB/s"
        )
        print(
            f"target: ours >= {TARGET_OF_AEAD:.2f} x aead: {vs['vs_aead']:.2f} {verdict};"
            f" by MB/CPU-s (load-proof): {vs['vs_aead_cpu']:.2f}"
        )


def _versus_cipher(
    runs: dict[str, list[dict[str, Any]]], med: dict[str, dict[str, float]]
) -> dict[str, float] | None:
    """Ours against the cipher alone: wall-clock and per-CPU-second ratios, aead's own rates."""
    if "ours" not in med or "aead" not in med:
        return None
    return {
        "aead_seal_MBps": round(statistics.median(r["seal_MBps"] for r in runs["aead"]), 1),
        "aead_open_MBps": round(statistics.median(r["open_MBps"] for r in runs["aead"]), 1),
        "vs_aead": round(med["ours"]["MBps"] / med["aead"]["MBps"], 3),
        "vs_aead_cpu": round(med["ours"]["cpu_MBps"] / med["aead"]["cpu_MBps"], 3),
    }


def figures(
    args: argparse.Namespace,
    arms: list[str],
    runs: dict[str, list[dict[str, Any]]],
    med: dict[str, dict[str, float]],
    load: tuple[float, float],
) -> dict[str, Any]:
    def fig(arm: str, key: str = "MBps") -> float | None:
        return round(med[arm][key], 1) if arm in med else None

    ours = med["ours"]["MBps"] if "ours" in med else None
    tcp = med["tcp"]["MBps"] if "tcp" in med else None
    return {
        "benchmark": "stream",
        "mib": args.mib,
        "chunk_mib": args.chunk_mib,
        "repeats": args.repeats,
        "ours_MBps": fig("ours"),
        "tcp_MBps": fig("tcp"),
        "ratio": round(ours / tcp, 3) if ours is not None and tcp else None,
        "libp2p_default_MBps": fig("default"),
        "aead_MBps": fig("aead"),
        **(_versus_cipher(runs, med) or {}),
        **{f"{arm}_MB_per_cpu_s": fig(arm, "cpu_MBps") for arm in arms},
        "load_avg": [round(x, 2) for x in load],
        "all_data_ok": all(r["ok"] for rs in runs.values() for r in rs),
    }
