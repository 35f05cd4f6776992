"""Waiting for a condition in tests: one helper for trio code and one for plain threads.

Polling on purpose: what tests wait for is a predicate over many nodes and over wall time
(leases expire, rounds advance), not one event anybody could set. A timeout says what was
awaited, so a failing test reads as a sentence.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

T = TypeVar("T")


async def wait_until(
    predicate: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - the caller's one knob; a cancel scope inside names `what`
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `predicate` until it returns something true, and return that; TimeoutError
    naming `what` otherwise. An async predicate (one that asks a peer) is awaited each pass."""
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            await trio.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout} s")


def wait_until_sync(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """`wait_until` for code outside trio (CLI daemons, benchmarks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout} s")
