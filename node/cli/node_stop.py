"""`peertrain node stop`: stop the daemon of a home as Ctrl-C would, and wait until it ended."""

from __future__ import annotations

import argparse
import os
import signal
import time

from ..api.control import call_sync
from ..config import NodeConfig
from .commands import _home

STOP_WAIT = 15.0  # seconds `node stop` waits for the daemon to end (it stops within 5 s)


def cmd_node_stop(args: argparse.Namespace) -> int:
    """Stop the daemon of this home as Ctrl-C would (SIGTERM to the pid its own status names:
    the control socket is this user's, so is the process), and wait until it has ended: its
    control socket is gone once it stopped cleanly (a process not yet reaped still exists)."""
    socket = NodeConfig(home=_home(args)).control_socket
    status = call_sync(socket, "status")
    os.kill(int(status["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline:
        try:
            os.kill(int(status["pid"]), 0)
        except ProcessLookupError:
            break
        if not socket.exists():
            break
        time.sleep(0.1)
    else:
        print(f"{status['name']} did not stop within {STOP_WAIT:.0f} s (pid {status['pid']})")
        return 1
    print(f"stopped {status['name']} ({status['peer_id']})")
    return 0
