"""Applying the soak's faults to a running `LanRun` (testing/lan_run.py), and telling our own
kills from crashes.

A fault that meets a member already in another fault is skipped, with its undoing (a frozen
member is not also killed, a dead one not frozen): otherwise a restart would start a second
daemon beside a frozen one. Without a LAN (the loopback fallback) partitions and netem cannot
be made: they are skipped and counted, and the report says so.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

MAX_LOG = 512  # lines of the fault log kept for the report
RESTART_BOUND = 180.0  # s: importing torch alone takes 30 s on a loaded machine


class Injector:
    def __init__(self, run, lan) -> None:
        self.run, self.lan = run, lan
        self.down: set[int] = set()  # killed by us, not restarted yet
        self.stopped: set[int] = set()
        self.done: dict[str, int] = {}  # kind → faults applied
        self.skipped: dict[str, int] = {}
        self.failed_restarts = 0
        self.restarting: dict[int, float] = {}  # member → when restarted, until it answers
        self.crashes: list[dict] = []  # daemons that exited without our signal
        self.log: list[str] = []

    def apply(self, fault, elapsed: float) -> None:
        handler = getattr(self, f"_{fault.kind}")
        applied = handler(fault.members)
        book = self.done if applied else self.skipped
        book[fault.kind] = book.get(fault.kind, 0) + 1
        if applied and len(self.log) < MAX_LOG:
            self.log.append(f"{elapsed:7.1f} s  {fault.kind} {list(fault.members)}")

    def _kill(self, members) -> bool:
        (m,) = members
        if m in self.down or m in self.stopped:
            return False
        self.run.daemons[m].stop(signal.SIGKILL)
        self.down.add(m)
        return True

    def _restart(self, members) -> bool:
        (m,) = members
        if m not in self.down:
            return False
        self.down.discard(m)
        self.run.daemons[m].start()  # not waited for here: the schedule goes on meanwhile
        self.restarting[m] = time.monotonic()
        return True

    def check_restarts(self, runs) -> None:
        """A restarted daemon that has not joined its run within RESTART_BOUND s failed."""
        for m, since in list(self.restarting.items()):
            if runs[m] is not None:
                del self.restarting[m]
            elif time.monotonic() - since > RESTART_BOUND:
                del self.restarting[m]
                self.failed_restarts += 1

    def _stop(self, members) -> bool:
        (m,) = members
        if m in self.down or m in self.stopped:
            return False
        self.run.daemons[m].process.send_signal(signal.SIGSTOP)
        self.stopped.add(m)
        return True

    def _cont(self, members) -> bool:
        (m,) = members
        if m not in self.stopped:
            return False
        self.stopped.discard(m)
        self.run.daemons[m].process.send_signal(signal.SIGCONT)
        return True

    def _partition(self, members) -> bool:
        if self.lan is None:
            return False
        self.lan.partition(members)
        return True

    def _heal(self, members) -> bool:
        if self.lan is None:
            return False
        self.lan.heal()
        return True

    def _fill_disk(self, members) -> bool:
        (m,) = members
        fill(self.run.daemons[m].home / "filler")
        return True

    def thaw_all(self) -> None:
        """Before stopping: a frozen daemon cannot act on SIGTERM."""
        for m in list(self.stopped):
            self._cont((m,))

    def notice_crashes(self, elapsed: float) -> None:
        """A daemon that exited without our doing is a crash: counted, then started again so
        the soak goes on (its log keeps the traceback)."""
        for m, daemon in enumerate(self.run.daemons):
            if m in self.down or daemon.alive():
                continue
            code = daemon.process.returncode if daemon.process else None
            self.crashes.append({"member": m, "at_s": round(elapsed, 1), "exit_code": code})
            del self.crashes[:-MAX_LOG]
            daemon.start()


def fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem is full (ENOSPC ends it)."""
    block = bytes(1 << 20)
    try:
        with open(path, "wb") as out:
            while True:
                out.write(block)
                out.flush()
    except OSError:
        pass


def mount_small(path: Path, mib: int) -> str | None:
    """A tmpfs of `mib` MiB at `path`; None when mounted, else why not (not root, no mount)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else f"no small filesystem: {done.stderr.strip()}"


def unmount(path: Path) -> None:
    for _ in range(10):  # busy until the daemon that used it has exited
        if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
            return
        time.sleep(0.5)
