"""Keeping a record alive: re-announce before it expires, so it outlives us only by its ttl.

A record in the DHT is a promise with an end date. A live peer renews its records every
`ttl / 3` (so two renewals may fail before the record lapses); a dead peer renews nothing and
its records vanish from every replica within `ttl`. Renewing also re-places the record at the
peers *now* nearest its key, which heals replicas lost to churn. The value is rebuilt each
time, so a record follows changes (new addresses, a new throughput figure).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio
from peertrain.protocol.errors import PeertrainError

if TYPE_CHECKING:
    from trio_typing import TaskStatus  # trio.TaskStatus (see dht/node.py)

log = logging.getLogger(__name__)

RETRY_FIRST = 1.0


class Putter(Protocol):
    """What announcing needs of a DHT node (`Dht.put`)."""

    async def put(self, key: str, value: Any, *, ttl: float) -> int: ...


async def keep_announced(
    dht: Putter,
    key: str,
    value: Callable[[], Any],
    *,
    ttl: float,
    every: float | None = None,
    task_status: TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Put `value()` under `key` now and every `every` seconds (default ttl / 3), forever.

    With `nursery.start`, returns after the first successful put (its holder count). Failed
    puts are retried with backoff from 1 s up to `every`, never letting the record lapse
    for lack of trying.
    """
    period = every if every is not None else ttl / 3
    if not 0 < period < ttl:
        raise ValueError("re-announce more often than the ttl, or the record lapses between puts")
    started = False
    retry = RETRY_FIRST
    while True:
        try:
            holders = await dht.put(key, value(), ttl=ttl)
        except (PeertrainError, trio.TooSlowError) as exc:
            log.info("dht: announcing %s failed (%s); retrying in %.0f s", key, exc, retry)
            await trio.sleep(retry)
            retry = min(retry * 2, period)
            continue
        retry = RETRY_FIRST
        if not started:
            task_status.started(holders)
            started = True
        await trio.sleep(period * random.uniform(0.9, 1.0))
