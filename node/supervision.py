"""Supervision: a failed service is logged, shown in `status` and retried, never the daemon's end.

Shared by every sub-layer of node/ (like errors.py): the daemon supervises its services, the run
manager its sessions. A service is an ordinary `async def run(self, *, task_status=...)`.

    health = await supervisor.start(nursery, "dht", dht.run)    # returns what it started with

On failure (any `Exception`; cancellation passes through) the traceback is logged at warning,
the error is recorded in its `ServiceHealth`, and the service is started again after a backoff
that doubles from `backoff_min` to `backoff_max`. A service that fails `max_failures` times
within `window` seconds is quarantined: it stays down with its last error shown, so a crash loop
costs one log line per backoff, not a spinning core. A service that returns is "stopped".

A failure before the first `started()` is a start-up failure: `critical` services (the daemon
cannot be a node without them) re-raise it to whoever started them; others are recorded and
retried in the background, and `start` returns None for them.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import trio

log = logging.getLogger(__name__)

Service = Callable[..., Awaitable[Any]]


class ServiceHealthStatus(TypedDict):
    """One entry of `services` in `status --json`."""

    name: str
    state: str
    restarts: int
    error: str | None
    error_at: float | None


@dataclass(slots=True, kw_only=True)
class ServiceHealth:
    name: str
    state: str = "starting"  # starting | running | restarting | quarantined | stopped
    restarts: int = 0
    error: str | None = None
    error_at: float | None = None  # wall-clock seconds
    _failures: deque[float] = field(default_factory=lambda: deque(maxlen=64), repr=False)

    def as_dict(self) -> ServiceHealthStatus:
        return ServiceHealthStatus(
            name=self.name,
            state=self.state,
            restarts=self.restarts,
            error=self.error,
            error_at=self.error_at,
        )


class Supervisor:
    def __init__(
        self,
        *,
        max_failures: int = 5,
        window: float = 300.0,
        backoff_min: float = 1.0,
        backoff_max: float = 30.0,
        max_tracked: int = 256,
    ) -> None:
        self.max_failures, self.window = max_failures, window
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self.max_tracked = max_tracked
        self.health: dict[str, ServiceHealth] = {}

    async def start(
        self,
        nursery: trio.Nursery,
        name: str,
        service: Service,
        *,
        critical: bool = False,
        on_quarantine: Callable[[ServiceHealth], None] | None = None,
    ) -> Any:
        """Start `service` under supervision in `nursery`; return its `started()` value.
        `on_quarantine` hears when a crash loop puts the service down for good."""
        health = self._track(name)
        return await nursery.start(self._supervise, health, service, critical, on_quarantine)

    def status(self) -> list[ServiceHealthStatus]:
        return [h.as_dict() for h in self.health.values()]

    def forget(self, name: str) -> None:
        """Drop a finished service from status (a run the user left, say)."""
        self.health.pop(name, None)

    def _track(self, name: str) -> ServiceHealth:
        health = ServiceHealth(name=name)
        self.health[name] = health
        while len(self.health) > self.max_tracked:  # oldest finished entries go first
            done = [n for n, h in self.health.items() if h.state in ("stopped", "quarantined")]
            self.health.pop(done[0] if done else next(iter(self.health)))
        return health

    async def _supervise(
        self,
        health: ServiceHealth,
        service: Service,
        critical: bool,
        on_quarantine: Callable[[ServiceHealth], None] | None,
        *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        first = _StartedOnce(task_status)
        backoff = self.backoff_min
        while True:
            try:
                await service(task_status=first.for_service(health))
            except Exception as exc:  # noqa: BLE001 - the supervisor's job: record, back off, retry
                if critical and not first.done:
                    raise
                self._record_failure(health, exc)
                first.give_up()  # a non-critical service that failed to start: start() returns None
                if self._quarantine_due(health):
                    health.state = "quarantined"
                    if on_quarantine is not None:
                        on_quarantine(health)
                    log.error(
                        "%s failed %d times in %.0f s: quarantined",
                        health.name,
                        len(health._failures),
                        self.window,
                    )
                    return
                health.state = "restarting"
                await trio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)
                health.restarts += 1
                continue
            health.state = "stopped"
            first.give_up()
            return

    def _record_failure(self, health: ServiceHealth, exc: BaseException) -> None:
        health.error = describe(exc)
        health.error_at = time.time()
        health._failures.append(time.monotonic())
        log.warning("%s failed: %s", health.name, health.error, exc_info=exc)

    def _quarantine_due(self, health: ServiceHealth) -> bool:
        now = time.monotonic()
        recent = [t for t in health._failures if now - t <= self.window]
        return len(recent) >= self.max_failures


def describe(exc: BaseException) -> str:
    """`Type: message` of the one real error inside nested single-exception groups (a service's
    nurseries wrap what failed; "ExceptionGroup: 1 sub-exception" tells a user nothing)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


class _StartedOnce:
    """Passes the first `started()` through to whoever called `Supervisor.start`; restarts get a
    status object that only marks the service as running again."""

    def __init__(self, task_status: trio.TaskStatus[Any]) -> None:
        self._outer = task_status
        self.done = False

    def for_service(self, health: ServiceHealth) -> trio.TaskStatus[Any]:
        return _Status(self, health)

    def started(self, value: Any) -> None:
        if not self.done:
            self.done = True
            self._outer.started(value)

    def give_up(self) -> None:
        self.started(None)


class _Status:
    def __init__(self, once: _StartedOnce, health: ServiceHealth) -> None:
        self._once, self._health = once, health

    def started(self, value: Any = None) -> None:
        self._health.state = "running"
        self._once.started(value)
