"""`peertrain swarm local`: N daemons on loopback as separate processes, watched live.

Every daemon bootstraps from the first one only; peer exchange then meshes the swarm, as it
would on the internet. The supervisor polls each daemon's control API (the same
`status` a user would call), shows a live table, and on exit or Ctrl-C stops every daemon it
started. The training issues extend this with modes and fault injection.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ControlError
from .processes import DaemonProcess, node_args, stop_all


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSwarmOptions:
    nodes: int = 4
    duration: float = 0.0  # 0: until Ctrl-C
    report: Path | None = None
    poll_interval: float = 2.0


def run_local_swarm(options: LocalSwarmOptions) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="peertrain-swarm-") as base:
        daemons: list[DaemonProcess] = []
        report: dict[str, Any] = {"nodes": options.nodes}
        try:
            addrs: list[str] = []
            for index in range(options.nodes):
                daemon = DaemonProcess(Path(base) / f"node{index}", node_args(bootstrap=addrs[:1])).start()
                daemons.append(daemon)
                status = daemon.wait_ready()
                addrs.append(status["share"])
                console.print(f"started node {index}: [bold]{status['name']}[/] {status['share']}")
            report["startup_s"] = round(time.monotonic() - started, 2)
            report.update(_watch(console, daemons, options))
        except KeyboardInterrupt:
            console.print("interrupted: stopping the swarm")
            report["interrupted"] = True
        finally:
            codes = stop_all(daemons)
            report["exit_codes"] = codes
        report["total_s"] = round(time.monotonic() - started, 2)
    _summarise(console, report)
    if options.report:
        options.report.write_text(json.dumps(report, indent=2))
    return 0 if all(code == 0 for code in report["exit_codes"]) and report.get("mesh_s") is not None else 1


def _watch(console, daemons: list[DaemonProcess], options: LocalSwarmOptions) -> dict[str, Any]:
    """Poll every daemon's status; a live table on a terminal, a progress line per poll otherwise."""
    import contextlib

    from rich.live import Live

    t0 = time.monotonic()
    mesh_s = None
    statuses: list[dict[str, Any] | None] = []
    live = Live(console=console, auto_refresh=False) if console.is_terminal else contextlib.nullcontext()
    with live:
        while True:
            statuses = [_poll(d) for d in daemons]
            if mesh_s is None and _full_mesh(statuses):
                mesh_s = round(time.monotonic() - t0, 2)
            elapsed = time.monotonic() - t0
            if console.is_terminal:
                live.update(_table(statuses, mesh_s), refresh=True)
            else:
                peers = " ".join(str(len(s["peers"])) if s else "down" for s in statuses)
                console.print(f"[{elapsed:5.1f} s] peers per node: {peers}" + ("  (full mesh)" if mesh_s is not None else ""))
            if options.duration and elapsed >= options.duration:
                break
            time.sleep(options.poll_interval)
    if not console.is_terminal:
        console.print(_table(statuses, mesh_s))
    return {
        "mesh_s": mesh_s,
        "final": [
            {"name": s["name"], "peer_id": s["peer_id"], "peers": len(s["peers"])} if s else None
            for s in statuses
        ],
    }


def _poll(daemon: DaemonProcess) -> dict[str, Any] | None:
    if not daemon.alive():
        return None
    try:
        return daemon.status(timeout=2.0)
    except ControlError:
        return None


def _full_mesh(statuses: list[dict[str, Any] | None]) -> bool:
    alive = [s for s in statuses if s]
    return len(alive) == len(statuses) and all(len(s["peers"]) >= len(alive) - 1 for s in alive)


def _table(statuses: list[dict[str, Any] | None], mesh_s: float | None):
    from rich.table import Table

    title = f"local swarm: full mesh after {mesh_s:.2f} s" if mesh_s is not None else "local swarm: connecting…"
    table = Table(title=title)
    for column in ("node", "name", "peers", "uptime", "address"):
        table.add_column(column)
    for index, s in enumerate(statuses):
        if s is None:
            table.add_row(str(index), "[red]down[/]", "-", "-", "-")
        else:
            table.add_row(str(index), s["name"], str(len(s["peers"])), f"{s['uptime_s']:.0f} s", s["share"])
    return table


def _summarise(console, report: dict[str, Any]) -> None:
    console.rule("summary")
    mesh = f"{report['mesh_s']:.2f} s after the last start" if report.get("mesh_s") is not None else "never"
    console.print(f"nodes: {report['nodes']}   started in {report.get('startup_s', '-')} s   full mesh: {mesh}")
    clean = sum(1 for code in report["exit_codes"] if code == 0)
    console.print(f"stopped cleanly: {clean}/{len(report['exit_codes'])}   total {report['total_s']} s")
