"""One run's life under the supervisor: rebuilt from its manifest on each start, quarantined
when it fails in a loop.

A session's state after a failure is not trusted (the replica and the checkpoints on disk are),
so every attempt builds a fresh RunSession. A quarantined run leaves a `QUARANTINED` marker in
its folder: the daemon does not restart it from its saved manifest by itself, and the user's
next explicit join clears it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
from peertrain.swarm.checkpoint_files import write_atomic

from ..supervision import ServiceHealth, describe
from .session import RunSession


class SessionLifecycle:
    """What the supervisor starts, and restarts, for one run."""

    def __init__(
        self,
        sessions: dict[str, RunSession],
        run_id: str,
        new_session: Callable[[], RunSession],
        home: Path,
    ) -> None:
        """`new_session()`: a fresh RunSession of `run_id` for each attempt; `home`: the node's
        data directory, where a quarantined run's marker goes."""
        self.sessions, self.run_id, self.new_session, self.home = (
            sessions,
            run_id,
            new_session,
            home,
        )
        self._scope: trio.CancelScope | None = None

    def leave(self) -> None:
        """Stop the run for good (`run leave`): its session ends as if finished, and the
        supervisor, seeing a clean end, does not restart it."""
        if self._scope is not None:
            self._scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[RunSession] = trio.TASK_STATUS_IGNORED):
        session = self.new_session()
        previous = self.sessions.get(self.run_id)
        if previous is not None:
            session.restarts = previous.restarts + 1
        self.sessions[self.run_id] = session
        try:
            with trio.CancelScope() as self._scope:
                await session.run(task_status=task_status)
        except Exception as exc:  # noqa: BLE001 - recorded for status, then the supervisor decides
            session.error = describe(exc)
            raise

    def quarantine(self, health: ServiceHealth) -> None:
        session = self.sessions.get(self.run_id)
        if session is not None:
            session.quarantined = True
        quarantine(self.home, self.run_id, health.error or "failed repeatedly")


def quarantine_file(home: Path, run_id: str) -> Path:
    return home / "runs" / run_id / "QUARANTINED"


def quarantine(home: Path, run_id: str, reason: str) -> None:
    """Mark a run so the daemon does not restart it from its saved manifest by itself."""
    path = quarantine_file(home, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (reason + "\n").encode())
