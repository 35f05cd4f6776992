"""Waiting for a condition in tests: one helper for trio code and one for plain threads.

Polling on purpose: what tests wait for is a predicate over many nodes and over wall time
(leases expire, rounds advance), not one event anybody could set. A timeout says what was
awaited, so a failing test reads as a sentence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")


async def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `predicate` until it returns something true, and return that; TimeoutError
    naming `what` otherwise."""
    with trio.move_on_after(timeout):
        while not (value := predicate()):  # noqa: ASYNC110 - a predicate, no one event
            await trio.sleep(interval)
        return value
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
