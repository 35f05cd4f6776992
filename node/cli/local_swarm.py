"""`peertrain swarm local`: N daemons on loopback as separate processes, watched live.

One supervisor for every mode. It owns what they share: a temporary home per daemon, the watch
loop (each daemon's `status` polled, the same call a user makes; a live table on a terminal, a
line per poll in a pipe), Ctrl-C, stopping every daemon it started, the summary and the JSON
report (`--report FILE`), written on Ctrl-C and SIGTERM too, with what happened so far. A
mode says what to start, when to act and what to report:
swarm_mesh.py (`--mode none`: daemons only; `--mode diloco`: a DiLoCo run, with churn and
Byzantine members) and swarm_pipeline.py (`--mode swarm`: stage servers and trainers).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..config import ENV_PREFIX
from .processes import DaemonProcess, stop_all

# one torch thread per daemon: N daemons on a few cores must not oversubscribe them
DAEMON_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True, slots=True)
class SwarmIsolation:
    """What keeps one local swarm apart from another on the same machine: a run name of its
    own (two swarms both called `local` met "several runs carry this name") and a private
    network key of its own (a daemon of another swarm cannot even connect), unless the user's
    environment names a key (PEERTRAIN_PSK) for every daemon."""

    run_name: str
    env: dict[str, str]  # DAEMON_ENV and the PSK, for every daemon this swarm starts


@functools.cache
def isolation() -> SwarmIsolation:
    """This process's swarm (one supervisor runs one swarm)."""
    env = dict(DAEMON_ENV)
    if not os.environ.get(f"{ENV_PREFIX}PSK"):
        env[f"{ENV_PREFIX}PSK"] = secrets.token_hex(32)
    return SwarmIsolation(run_name=f"local-{secrets.token_hex(3)}", env=env)


class SwarmMode(Protocol):
    """What one `--mode` does; the supervisor calls these in this order."""

    daemons: list[DaemonProcess]  # every daemon it started (the supervisor stops them)
    poll_interval: float
    live_table: bool  # a live table on a terminal (else one line per poll everywhere)

    def header(self) -> dict[str, Any]:
        """The report's first keys (what was asked for)."""
        ...

    def start(self) -> None: ...

    def step(self, elapsed: float) -> bool:
        """Poll the daemons and act (kills, restarts); True once the run is over."""
        ...

    def line(self, elapsed: float) -> str: ...

    def table(self) -> Any: ...

    def conclude(self) -> None:
        """After a run that was not interrupted: what to ask the daemons before they stop."""
        ...

    def report(self) -> dict[str, Any]:
        """What happened (so far, if interrupted), from the latest polls."""
        ...

    def summarise(self, console: Any, report: dict[str, Any]) -> None: ...

    def succeeded(self, report: dict[str, Any]) -> bool:
        """The exit status: 0 if this is true."""
        ...


def run_local_swarm(make_mode: Callable[[Path, Any], SwarmMode], report_path: Path | None) -> int:
    """Start the mode's daemons under a temporary directory, watch them, stop them, report."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM, like Ctrl-C, reports first
    with tempfile.TemporaryDirectory(prefix="peertrain-swarm-") as base_dir:
        mode = make_mode(Path(base_dir), console)
        report: dict[str, Any] = mode.header()
        try:
            mode.start()
            report["startup_s"] = round(time.monotonic() - started, 2)
            _watch(console, mode)
            mode.conclude()
        except KeyboardInterrupt:
            console.print("interrupted: stopping the swarm and writing what happened so far")
            report["interrupted"] = True
        finally:
            signal.signal(signal.SIGTERM, previous)
            try:
                report.update(mode.report())
            finally:  # a failed report must not leave the daemons running
                report["exit_codes"] = stop_all(mode.daemons)
        report["total_s"] = round(time.monotonic() - started, 2)
    mode.summarise(console, report)
    if report_path:
        report_path.write_text(json.dumps(report, indent=2))
    return 0 if mode.succeeded(report) else 1


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _watch(console: Any, mode: SwarmMode) -> None:
    """Poll until the mode says the run is over, showing each poll."""
    from rich.live import Live

    live_table = mode.live_table and console.is_terminal
    live = Live(console=console, auto_refresh=False) if live_table else contextlib.nullcontext()
    t0 = time.monotonic()
    with live:
        while True:
            elapsed = time.monotonic() - t0
            done = mode.step(elapsed)
            if live_table:
                live.update(mode.table(), refresh=True)
            else:
                console.print(mode.line(elapsed))
            if done:
                break
            time.sleep(mode.poll_interval)
    if mode.live_table and not console.is_terminal:
        console.print(mode.table())
