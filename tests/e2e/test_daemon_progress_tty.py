"""A daemon run on a terminal (`peertrain node start`/`join`) draws its runs' progress below its
log lines (issue 18): here a run that waits for a second member. A real daemon process on a
pseudo-terminal, the run created through the CLI."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from peertrain.node.cli.processes import DaemonProcess
from peertrain.node.config import NodeConfig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux pseudo-terminal"),
]


class Terminal:
    """What a process wrote to the pseudo-terminal it was given (bounded: the test's output)."""

    def __init__(self) -> None:
        self.fd, self.child = pty.openpty()
        self.data = b""

    def read_until(self, needle: bytes, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while needle not in self.data and time.monotonic() < end:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    self.data += os.read(self.fd, 65536)
                except OSError:  # the process is gone and the terminal closed
                    break
        return needle in self.data


def test_a_daemon_on_a_terminal_shows_the_wait_for_members_under_its_log(tmp_path: Path):
    terminal = Terminal()
    command = [sys.executable, "-m", "peertrain", "node", "start", "--home", str(tmp_path)]
    daemon = subprocess.Popen(
        [*command, "--listen", "/ip4/127.0.0.1/tcp/0"],
        stdin=terminal.child,
        stdout=terminal.child,
        stderr=terminal.child,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(terminal.child)
    handle = DaemonProcess(tmp_path, [])
    handle.process = daemon  # to stop it by its PID, as every daemon of the tests is
    try:
        assert terminal.read_until(b"give others", 60), terminal.data[-2000:]
        assert NodeConfig(home=tmp_path).control_socket.exists()
        create = [sys.executable, "-m", "peertrain", "run", "create", "--name", "wait"]
        flags = ["--model", "mlp", "--dataset", "digits", "--min-members", "2"]
        subprocess.run([*create, *flags, "--home", str(tmp_path)], check=True, timeout=120)
        seen = terminal.read_until(b"waiting for 1 more members (have 1, need 2)", 60)
    finally:
        handle.stop()
        os.close(terminal.fd)
    text = terminal.data.decode(errors="replace")
    assert seen, text[-3000:]
    assert "\x1b[" in text  # drawn in place with terminal codes, not printed as log lines
    assert "wait  round 0  loss " in text
