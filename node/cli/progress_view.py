"""Progress bars of the CLI commands that wait on a daemon (`status --watch`, `run create
--follow`, `run join --follow`): rounds, inner steps i/H, a state download (MB, MB/s, donors),
and "waiting for N more members (have M, need Q), 12 s".

Drawn from each run's `progress` in status, whose words come from swarm/progress.py (the daemon
logs the same lines). Pure functions of the status dictionary, so they are tested without a
daemon; bars for terminals, plain lines for pipes and logs.
"""

from __future__ import annotations

from typing import Any

from peertrain.swarm.progress import download_text, waiting_text

from ..api.history import runs_of

BAR_WIDTH = 28


def headline(run: dict[str, Any]) -> str:
    progress = run.get("progress") or {}
    rounds = progress.get("rounds") or 0
    loss = run.get("loss")
    return (
        f"{run['name']}  round {run['round']}{f'/{rounds}' if rounds else ''}"
        f"  loss {'-' if loss is None else f'{loss:.4f}'}  members {len(run['members'])}"
        f"  {'finished' if run.get('finished') else run['phase']}"
    )


def bars(run: dict[str, Any]) -> list[tuple[str, float, float, str]]:
    """(label, completed, total, figures) for each bar the run shows now."""
    progress = run.get("progress") or {}
    out = []
    if progress.get("rounds"):
        out.append(
            ("rounds", run["round"], progress["rounds"], f"{run['round']}/{progress['rounds']}")
        )
    if progress.get("phase") == "inner steps" and progress.get("inner_steps"):
        i, h = progress["inner_step"], progress["inner_steps"]
        out.append(("inner steps", i, h, f"{i}/{h}"))
    download = progress.get("download")
    if download:
        total = download["bytes_total"]
        figures = download_text(download).split(": ", 1)[1]
        out.append((f"download {download['what']}", download["bytes_done"], total or 1, figures))
    return out


def progress_lines(status: dict[str, Any]) -> list[str]:
    """Plain text, one line per run and per thing it waits on (pipes, logs, tests)."""
    lines = []
    for run in runs_of(status):
        lines.append(headline(run))
        progress = run.get("progress") or {}
        for label, _, _, figures in bars(run):
            if label != "rounds":
                lines.append(f"  {label}: {figures}")
        if progress.get("waiting"):
            lines.append(f"  {waiting_text(progress['waiting'])}")
        if run.get("error"):
            lines.append(f"  error: {run['error']}")
    return lines


def progress_view(status: dict[str, Any]):
    """The same as `progress_lines`, with bars: a rich renderable."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    for run in runs_of(status):
        parts.append(Text(headline(run), style="bold"))
        table = Table.grid(padding=(0, 1))
        for label, done, total, figures in bars(run):
            bar = ProgressBar(total=total, completed=min(done, total), width=BAR_WIDTH)
            table.add_row(Text(f"  {label}"), bar, Text(figures))
        if table.row_count:
            parts.append(table)
        waiting = (run.get("progress") or {}).get("waiting")
        if waiting:
            parts.append(Text(f"  {waiting_text(waiting)}", style="yellow"))
        if run.get("error"):
            parts.append(Text(f"  error: {run['error']}", style="red"))
    return Group(*parts)
