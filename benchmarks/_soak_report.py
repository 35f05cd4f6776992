"""The soak's figures from the daemons' logs (appended to over every life of a member, so a
restart loses none), its table, and its PNG of rounds, RSS and fds over time."""

from __future__ import annotations

import json
import re
from pathlib import Path

CLOSED_WITHOUT = re.compile(r"round \d+ closed without (\d+) member")


def log_figures(daemons) -> dict:
    """Updates lost (members a round closed without, in the anchor's log: every round closes
    there), state downloads and their bytes, penalties and bans given, tracebacks, and rounds
    closed alone over every life of every member (a status counts its own life only: the
    soak's first hour said 0 while one member's log held 5, on the cut side of the partition)."""
    downloads = download_bytes = penalties = tracebacks = alone = 0
    for daemon in daemons:
        for line in _lines(daemon.log_path):
            alone += '"round_alone"' in line
            if '"download_done"' in line:
                downloads += 1
                download_bytes += int(_json(line).get("bytes_done", 0))
            penalties += ("penalised " in line) + ("banned " in line)
            tracebacks += line.startswith("Traceback")
    lost = sum(int(m.group(1)) for m in CLOSED_WITHOUT.finditer(_text(daemons[0].log_path)))
    return {
        "updates_lost": lost,
        "state_downloads": downloads,
        "state_download_bytes": download_bytes,
        "honest_penalised": penalties,
        "tracebacks": tracebacks,
        "rounds_alone": alone,
    }


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _lines(path: Path):
    yield from _text(path).splitlines()


def _json(line: str) -> dict:
    try:
        return json.loads(line)
    except ValueError:
        return {}


def table_rows(report: dict) -> list[tuple[str, object]]:
    rows = [
        ("transport", report["transport"]),
        ("minutes of faults + quiet", report["minutes"]),
        ("rounds completed", report["rounds"]),
        ("rounds without faults (baseline, same time)", report["baseline_rounds"]),
        ("faults applied", report["faults"]),
        ("faults skipped", report["skipped"]),
        ("s from the last fault to one checksum", report["agree_after_last_fault_s"]),
        ("updates lost", report["updates_lost"]),
        ("state downloads", report["state_downloads"]),
        ("state download bytes", report["state_download_bytes"]),
        ("crashes (target 0)", len(report["crashes"])),
        ("failed restarts (target 0)", report["failed_restarts"]),
        ("honest peers penalised (target 0)", report["honest_penalised"]),
        ("rounds closed alone", report["rounds_alone"]),
        ("checkpoints not written (full disk)", report["checkpoint_failures"]),
    ]
    for row in report["usage"]:
        rows.append(
            (
                f"member {row['member']}: RSS MB, MB/h; fds, fds/h",
                f"{row['rss_mb_last']}, {row['rss_mb_per_h']}; {row['fds_last']}, "
                f"{row['fds_per_h']}",
            )
        )
    for mode, figures in (report.get("modes") or {}).items():
        rows.append((f"{mode} beside: succeeded (exit code)", figures["exit_code"]))
        for key, value in figures.items():
            if key not in ("succeeded", "exit_code", "report", "daemons"):
                rows.append((f"{mode} beside: {key}", value))
        slopes = [d["rss_mb_per_h"] for d in figures["daemons"] if d["rss_mb_per_h"] is not None]
        if slopes:
            rows.append(
                (f"{mode} beside: RSS MB/h per daemon (min, max)", (min(slopes), max(slopes)))
            )
    return rows


def plot(path: Path, samples, baseline_rate: float | None) -> str | None:
    """Rounds, RSS and fds of every member over time; None when written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no PNG: matplotlib is not installed (.venv/bin/pip install -e '.[plots]')"
    figure, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for m, series in enumerate(samples.by_member):
        at = [s.at / 60 for s in series]
        for axis, key in zip(axes, ("round", "rss_mb", "fds"), strict=True):
            values = [getattr(s, key) for s in series]
            axis.plot(at, [v if v is not None else float("nan") for v in values], label=f"m{m}")
    if baseline_rate:
        end = max((s.at for series in samples.by_member for s in series), default=0)
        # rounds/s from the baseline, drawn from the soak's start
        axes[0].plot([0, end / 60], [0, baseline_rate * end], "k--", label="no faults")
    for axis, title in zip(axes, ("round", "RSS (MB)", "open fds"), strict=True):
        axis.set_ylabel(title)
        axis.grid(alpha=0.3)
    axes[0].legend(ncol=5, fontsize=7)
    axes[-1].set_xlabel("minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return None
