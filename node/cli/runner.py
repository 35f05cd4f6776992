"""Running a daemon in the foreground: banner, signals, clean exit.

SIGINT and SIGTERM cancel the daemon's nursery; services unwind and the process exits 0 with
no traceback. If unwinding were ever to hang (a library task that ignores cancellation), a
watchdog ends the process after `SHUTDOWN_GRACE` seconds rather than leave a zombie node that
still holds its port and its control socket.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from ..api.serve import serve_node
from ..config import NodeConfig
from ..daemon import Daemon, DaemonStatus
from ..net.identity import load_or_create_identity

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 4.0
PROGRESS_EVERY = 0.5


async def serve_until_signalled(config: NodeConfig, ranks: Any = None) -> None:
    """`ranks`: the RankLease of a node started with `--ranks N` (node/cli/ranks.py)."""
    identity = load_or_create_identity(config.home)
    daemon = Daemon(config, identity, ranks=ranks)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_node, daemon)
            print_banner(daemon.status(), config.control_socket)
            if config.log_format in ("auto", "rich") and sys.stderr.isatty():
                nursery.start_soon(show_progress, daemon.status)
            async for signum in signals:
                log.info("received %s, stopping", signal.Signals(signum).name)
                _arm_watchdog()
                nursery.cancel_scope.cancel()
                break
        # Leaving the receiver restores the default handlers; a second Ctrl-C or SIGTERM in
        # the last milliseconds of shutdown must not turn a clean exit into a signal death.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log.info("stopped")


def print_banner(status: DaemonStatus, control_socket: Path) -> None:
    lines = [
        f"peertrain node {status['name']}",
        f"  peer id       {status['peer_id']}",
        f"  give others   {status['share']}",
    ]
    lines += [f"  also at       {a}" for a in status["addrs"][1:]]
    if status["private_network"]:
        lines.append("  private network: peers need the same --psk")
    lines.append(f"  control       {control_socket}")
    try:
        print("\n".join(lines), flush=True)
    except OSError:  # stdout on a full disk or a closed pipe: serve on, unseen, not exit 1
        pass


async def show_progress(read_status: Callable[[], DaemonStatus]) -> None:
    """On a terminal: the runs' progress bars (inner steps, downloads, waits) below the log
    lines, redrawn twice a second on the log's own console so the two never tear."""
    from rich.live import Live
    from rich.text import Text

    from ..api.history import runs_of
    from ..log_setup import rich_console
    from .progress_view import progress_view

    with Live(Text(""), console=rich_console(), auto_refresh=False, transient=True) as live:
        while True:
            status = read_status()
            live.update(progress_view(status) if runs_of(status) else Text(""))
            live.refresh()
            await trio.sleep(PROGRESS_EVERY)


def _arm_watchdog() -> None:
    def expire() -> None:
        sys.stderr.write(f"peertrain: shutdown took over {SHUTDOWN_GRACE:.0f} s; exiting anyway\n")
        sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(SHUTDOWN_GRACE, expire)
    timer.daemon = True
    timer.start()
