"""Real daemons as `peertrain node start` processes, driven through the CLI and control socket.

    with cli_daemons(3, tmp_path) as daemons:        # homes under tmp_path; i > 0 bootstrap from 0
        daemons[1].status()["peers"]
    peertrain_cli(daemons[0].home, "run", "list", "--json")   # any command, on a daemon's home

What a user runs, process boundary included: the e2e tests and the `daemons` fixture use it.
Every process is ours (a `DaemonProcess` holding its Popen), stopped by PID on exit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all


@contextlib.contextmanager
def cli_daemons(
    n: int, base: Path, *, extra: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[list[DaemonProcess]]:
    """N `peertrain node start` processes; daemon i>0 bootstraps from daemon 0 by multiaddr."""
    daemons: list[DaemonProcess] = []
    try:
        first: dict[str, Any] | None = None
        for index in range(n):
            bootstrap = [first["share"]] if first else []
            daemon = DaemonProcess(
                Path(base) / f"node{index}", node_args(bootstrap=bootstrap, extra=extra), env
            )
            daemons.append(daemon.start())
            status = daemon.wait_ready()
            first = first or status
        yield daemons
    finally:
        stop_all(daemons)


def peertrain_cli(
    home: Path, *args: str, check: bool = True, timeout: float = 150.0
) -> subprocess.CompletedProcess[str]:
    """`peertrain ARGS --home HOME` as a user types it (one torch thread, as daemons get);
    with `check`, a failure raises CommandFailed with what the command printed."""
    done = subprocess.run(
        [sys.executable, "-m", "peertrain", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **DAEMON_ENV},
    )
    if check and done.returncode != 0:
        raise CommandFailed(
            f"`peertrain {' '.join(args)}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done


class CommandFailed(AssertionError):
    """A CLI command a test ran failed; the message holds its output."""
