"""Real daemons as `peertrain node start` processes, driven through the CLI and control socket.

    with cli_daemons(3, tmp_path) as daemons:        # homes under tmp_path; i > 0 bootstrap from 0
        daemons[1].status()["peers"]

What a user runs, process boundary included: the e2e tests and the `daemons` fixture use it.
Every process is ours (a `DaemonProcess` holding its Popen), stopped by PID on exit;
`peertrain_cli` runs one CLI command as a user types it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all

# The small DiLoCo run of the CLI tests and benchmarks: an MLP on scikit-learn's 8x8 digits
DIGITS_MLP = ("--model", "mlp", "--dataset", "digits", "--batch-size", "32")


@contextlib.contextmanager
def cli_daemons(
    n: int, base: Path, *, extra: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[list[DaemonProcess]]:
    """N `peertrain node start` processes; daemon i>0 bootstraps from daemon 0 by multiaddr."""
    daemons: list[DaemonProcess] = []
    try:
        first: dict[str, Any] | None = None
        for index in range(n):  # 1..n-1 start together: each start is seconds of CPU
            bootstrap = [first["share"]] if first else []
            daemon = DaemonProcess(
                Path(base) / f"node{index}", node_args(bootstrap=bootstrap, extra=extra), env
            )
            daemons.append(daemon.start())
            first = first or daemon.wait_ready()
        for daemon in daemons[1:]:
            daemon.wait_ready()
        yield daemons
    finally:
        stop_all(daemons)


def peertrain_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`peertrain ARGS...` in a fresh interpreter, output captured as text; `env` adds to ours."""
    return subprocess.run(
        [sys.executable, "-m", "peertrain", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        env={**os.environ, **env} if env is not None else None,
    )


def cli_json(*args: str, timeout: float = 240) -> Any:
    """`peertrain ARGS --json` as a process; its JSON output (CalledProcessError if it fails)."""
    return json.loads(peertrain_cli(*args, "--json", timeout=timeout).stdout)


def run_status(daemon: DaemonProcess) -> dict[str, Any]:
    """The daemon's run in `status`; {} while it has none or does not answer yet."""
    try:
        return daemon.status(timeout=5)["run"] or {}
    except Exception:  # noqa: BLE001 - a daemon that does not answer yet has no run; asked again
        return {}
