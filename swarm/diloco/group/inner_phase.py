"""A member's inner phase, abandoned when the group closes the round without it.

A member that starts a round late (restarted, joining, downloading the state) ends its H inner
steps after the group has closed that round. Its update then counts nowhere, and by the time it
has adopted the group's state the group is as far into the next round as it was behind in this
one: it ends every round a whole inner phase late again. Seen at 25M parameters: a late joiner
downloaded the state three times in six rounds and never had an update counted. Stopping the
inner steps the moment the group's round closes puts the member at the group's start of the
next round (less the download), and loses nothing that would have counted.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from peertrain.swarm.diloco.member.member import DiLoCoMember

CHECK_EVERY = 1.0  # seconds between looks at the group's round during the inner steps


async def inner_phase(
    member: DiLoCoMember,
    thread: Callable[..., Awaitable[Any]],
    overtaken: Callable[[], bool],
) -> bytes | None:
    """`member`'s update of its round, computed on `thread` (the member's torch thread); None
    when `overtaken()` (read on the event loop) turned true first."""
    stop = threading.Event()  # read by the torch thread before each inner step

    async def watch() -> None:
        while not overtaken():  # noqa: ASYNC110 - replicated state changes with no event to wait on
            await trio.sleep(CHECK_EVERY)
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        payload = await thread(member.prepare_update, stop.is_set)
        nursery.cancel_scope.cancel()
    return payload
