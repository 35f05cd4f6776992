"""One DiLoCo run of real CLI daemons, each in its own namespace of a `Lan` (testing/netns_lan.py),
or all on loopback when there is no LAN (`lan=None`: the soak's fallback without root).

Member 0 is `peertrain node start` and creates the run (`peertrain run create`): it is the run's
anchor. Every other member is `peertrain join <member 0> --run NAME`, exactly as a user types it.
A member keeps its home across restarts, so a SIGKILLed one comes back as the same peer.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess

from .netns_lan import Lan

PENALISED = "penalised "  # node/net/penalties.py's log line for every penalty it gives
BANNED = "banned "


class LanDaemon(DaemonProcess):
    """A daemon started inside member `index`'s namespace (or on loopback without a LAN)."""

    def __init__(self, lan: Lan | None, index: int, home: Path, args: list[str], env: dict):
        super().__init__(home, args, env)
        self.lan, self.index = lan, index

    def start(self) -> LanDaemon:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._signalled = False
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        argv = [sys.executable, "-m", "peertrain", *self.args, "--home", str(self.home)]
        if self.lan is not None:
            argv = self.lan.exec_argv(self.index, argv)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        return self

    def listen(self) -> str:
        return self.lan.listen(self.index) if self.lan else "/ip4/127.0.0.1/tcp/0"

    def penalties_logged(self) -> int:
        """Penalties and bans this daemon gave, over all its lives (its log is appended to)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return 0
        return text.count(PENALISED) + text.count(BANNED)


class LanRun:
    """`size` daemons in one DiLoCo run; `run_flags` go to `peertrain run create`."""

    def __init__(
        self,
        lan: Lan | None,
        base: Path,
        size: int,
        run_flags: Sequence[str],
        *,
        member_env: dict[int, dict[str, str]] | None = None,
        homes: dict[int, Path] | None = None,
    ):
        self.lan, self.base, self.size = lan, Path(base), size
        self.run_flags = list(run_flags)
        self.name = f"lan-{secrets.token_hex(3)}"
        # a private network key of its own: no other swarm on this machine can connect
        self.env = {**DAEMON_ENV, "PEERTRAIN_PSK": secrets.token_hex(32)}
        self.member_env = member_env or {}
        self.homes = homes or {}
        self.daemons: list[LanDaemon] = []
        self.first_addr = ""

    def _daemon(self, index: int, args: list[str]) -> LanDaemon:
        home = self.homes.get(index, self.base / f"m{index}")
        env = {**self.env, **self.member_env.get(index, {})}
        daemon = LanDaemon(self.lan, index, home, [], env)
        daemon.args = [*args, "--listen", daemon.listen(), "--log-format", "json"]
        return daemon

    def start(self, timeout: float = 180) -> None:
        first = self._daemon(0, ["node", "start"]).start()
        self.daemons.append(first)
        self.first_addr = first.wait_ready(timeout=timeout)["share"]
        self._create_run(first.home)
        for index in range(1, self.size):  # all at once: each start is seconds of CPU
            self.daemons.append(self._daemon(index, ["join", self.first_addr, "--run", self.name]))
            self.daemons[-1].start()
        for daemon in self.daemons[1:]:
            daemon.wait_ready(timeout=timeout)

    def _create_run(self, home: Path) -> None:
        argv = [sys.executable, "-m", "peertrain", "run", "create", "--home", str(home)]
        argv += ["--name", self.name, "--json", *self.run_flags]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"run create failed: {done.stderr[-2000:]}")
        json.loads(done.stdout)

    def stop(self) -> list[int | None]:
        for daemon in self.daemons:
            daemon.send_signal()
        return [daemon.stop() for daemon in self.daemons]

    # --- reading ----------------------------------------------------------------------------
    def statuses(self, timeout: float = 5.0) -> list[dict[str, Any] | None]:
        return [d.status_or_none(timeout) for d in self.daemons]

    def runs(self, timeout: float = 5.0) -> list[dict[str, Any] | None]:
        return [(s or {}).get("run") for s in self.statuses(timeout)]

    def penalties(self) -> dict[str, int]:
        """What every daemon counted against its peers: all are honest here, so any is wrong.
        `peer_faults` (the inbound shield's) and the log's penalty and ban lines."""
        logged = sum(d.penalties_logged() for d in self.daemons)
        faults = sum(
            int(((s or {}).get("shield") or {}).get("peer_faults", 0)) for s in self.statuses()
        )
        return {"penalties_logged": logged, "peer_faults": faults}


def one_checksum(runs: Sequence[dict[str, Any] | None]) -> str | None:
    """The checksum every given run holds, or None while they differ or one cannot say."""
    sums = {(r or {}).get("state_checksum") for r in runs}
    if len(sums) != 1 or None in sums or "" in sums:
        return None
    return sums.pop()
