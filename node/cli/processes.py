"""Daemons as separate processes, started through the CLI exactly as a user would.

Used by `peertrain swarm local` and by the end-to-end tests (`peertrain.testing`). Each daemon
gets its own home; its output goes to `<home>/daemon.log`; it is stopped with SIGTERM and, if
it ignores that for `STOP_TIMEOUT` seconds, SIGKILL. Only processes we started are signalled,
by their PID. A daemon started from the supervisor's main thread gets SIGTERM when the
supervisor dies, however it dies (Linux's parent-death signal): a `swarm local` SIGKILLed, or
killed by a test's watchdog, left its daemons training on their own for good.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..config import NodeConfig
from ..errors import ControlError, NodeError

STOP_TIMEOUT = 5.0
PR_SET_PDEATHSIG = 1  # prctl(2)


def _terminate_with(parent: int):
    """What the child runs before `exec`: SIGTERM it when `parent` dies. Linux ties the signal
    to the thread that forked, not the process: a daemon started from a worker thread (which
    may end first) is left to its supervisor's stop instead."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class DaemonProcess:
    """One `peertrain` daemon process with its own home."""

    def __init__(self, home: Path, args: Sequence[str], env: dict[str, str] | None = None):
        self.home = Path(home)
        self.args = list(args)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._signalled = False

    @property
    def log_path(self) -> Path:
        return self.home / "daemon.log"

    @property
    def control_socket(self) -> Path:
        return NodeConfig(home=self.home).control_socket

    def start(self) -> DaemonProcess:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._signalled = False
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "peertrain", *self.args, "--home", str(self.home)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_terminate_with(os.getpid()),
            )
        return self

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        """Block until the daemon answers `status`; raise with its log tail if it died first.
        The bound is generous: on a loaded machine importing torch alone can take 30 s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise NodeError(
                    f"daemon in {self.home} exited with {self.process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            try:
                return self.status(timeout=2.0)
            except ControlError:
                time.sleep(0.1)
        raise NodeError(
            f"daemon in {self.home} not ready after {timeout:.0f} s:\n{self.log_tail()}"
        )

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        return call_sync(self.control_socket, "status", timeout=timeout)

    def status_or_none(self, timeout: float) -> dict[str, Any] | None:
        """The status, or None while the daemon is down or too busy to answer (a supervisor's
        poll: the next one asks again)."""
        if not self.alive():
            return None
        try:
            return self.status(timeout=timeout)
        except ControlError:
            return None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signum)
            self._signalled = True

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int | None:
        """Signal, wait, escalate to SIGKILL; return the exit code."""
        if self.process is None:
            return None
        if not self._signalled:
            self.send_signal(signum)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def node_args(*, bootstrap: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
    """CLI arguments for a loopback daemon that logs JSON lines."""
    args = ["node", "start", "--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]
    for addr in bootstrap:
        args += ["--bootstrap", addr]
    return args + list(extra)


def stop_all(daemons: Sequence[DaemonProcess]) -> list[int | None]:
    """SIGTERM every daemon at once, then collect exit codes (SIGKILL stragglers)."""
    for daemon in daemons:
        daemon.send_signal(signal.SIGTERM)
    return [daemon.stop() for daemon in daemons]
