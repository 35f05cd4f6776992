"""A local swarm's daemons end with their supervisor, however it ends: `swarm local` SIGKILLed
(a test's watchdog, an impatient user's kill -9, the OOM killer) used to leave its daemons
running on their own for good, each a Python process with torch loaded."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from peertrain.node.config import NodeConfig

pytestmark = pytest.mark.slow


def daemons_of(supervisor: subprocess.Popen, n: int, timeout: float) -> list[psutil.Process]:
    """The supervisor's `n` daemon processes, once each is up (its control socket exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = [c for c in psutil.Process(supervisor.pid).children() if "node" in c.cmdline()]
        if len(children) == n and all(_control_socket(c).exists() for c in children):
            return children
        time.sleep(0.5)
    raise AssertionError(f"{n} daemons not up in {timeout} s")


def _control_socket(daemon: psutil.Process) -> Path:
    args = daemon.cmdline()
    return NodeConfig(home=Path(args[args.index("--home") + 1])).control_socket


def test_a_sigkilled_swarm_local_takes_its_daemons_with_it(tmp_path):
    command = [sys.executable, "-m", "peertrain", "swarm", "local", "--nodes", "2"]
    with (tmp_path / "out.log").open("w") as out:
        supervisor = subprocess.Popen([*command, "--duration", "300"], stdout=out, stderr=out)
    daemons: list[psutil.Process] = []
    try:
        daemons = daemons_of(supervisor, 2, timeout=120)
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=10)
        gone, alive = psutil.wait_procs(daemons, timeout=20)
        assert alive == [], f"still running after their supervisor died: {alive}"
        assert len(gone) == 2
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        for daemon in daemons:  # never leave one behind here, whatever failed
            if daemon.is_running():
                daemon.kill()
