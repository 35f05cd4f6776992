"""`peertrain join <peer ID>`: keep the daemon joined to a peer known only by its ID.

The CLI talks to its own daemon over the control socket (`resolve_peer`, node/services/dht.py)
and asks again, with backoff, whenever the connection to that peer drops.
"""

from __future__ import annotations

import logging

import trio

from ..api.control import call
from ..errors import ControlError

log = logging.getLogger(__name__)

RESOLVE_TIMEOUT = 8.0


async def keep_joined(
    control_socket, peer: str, *, check_every: float = 5.0, max_backoff: float = 30.0
) -> None:
    """For `peertrain join <peer ID>`: once the daemon serves, have it resolve and connect to
    `peer`, and again whenever that connection drops. Failures are logged and retried with
    backoff (the peer may come online later), like PeerKeeper does for bootstrap addresses."""
    backoff = 1.0
    joined = False
    while True:
        try:
            status = await call(control_socket, "status", timeout=5.0)
        except ControlError:  # not serving yet (or stopping: then this task is cancelled)
            await trio.sleep(0.1)
            continue
        if joined and peer in status["peers"]:
            await trio.sleep(check_every)
            continue
        try:
            # the daemon may wait `timeout` for its DHT to bootstrap, then `timeout` to resolve:
            # waiting less here would give up on a resolution that is about to succeed
            found = await call(
                control_socket,
                "resolve_peer",
                {"peer": peer, "timeout": RESOLVE_TIMEOUT},
                timeout=2 * RESOLVE_TIMEOUT + 5.0,
            )
        except ControlError as exc:
            log.warning("joining %s: %s (retrying in %.0f s)", peer, exc, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
            continue
        backoff = 1.0
        joined = True
        log.info("joined %s (found by %s) at %s", peer, found["how"], ", ".join(found["addrs"]))
