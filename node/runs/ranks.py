"""A node of several ranks (`--ranks N`) lends them to one DiLoCo run at a time.

The session asks for the ranks before building its member: when it gets them, the followers
are sent the run's spec and data path (diloco/member/intra_node.py: `send_job`) and build the same
model, and the member's inner loop is the distributed one. When the session ends, for whatever
reason, the followers are released (`close`: they end at θ_global) and the ranks are free for
the next run. Torch's collectives block, so both run in a worker thread, shielded on the way out.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

log = logging.getLogger(__name__)


async def lend_ranks(ranks: Any, run_id: str, spec: bytes, data: str | None) -> Any:
    """This node's IntraNode for run `run_id`, its followers told to follow it; None when the
    node has no ranks (`ranks`: its RankLease, or None) or another run holds them (this run then
    trains on rank 0 alone)."""
    if ranks is None:
        return None
    intra = ranks.take(run_id)
    if intra is None:
        log.warning("run %s trains on rank 0 alone: run %s holds the node's ranks",
                    run_id[:12], (ranks.holder or "")[:12])  # fmt: skip
        return None
    from peertrain.swarm.diloco.member.intra_node import send_job

    await trio.to_thread.run_sync(send_job, intra, {"spec": spec, "data": data})
    log.info("run %s trains on %d ranks", run_id[:12], intra.world)
    return intra


async def return_ranks(ranks: Any, run_id: str, intra: Any, inner: Any) -> None:
    """Release the followers of `run_id` (`inner`: its member's inner loop) and the lease."""
    if intra is None or ranks is None:
        return
    with trio.CancelScope(shield=True):
        if inner is not None and hasattr(inner, "close"):
            await trio.to_thread.run_sync(inner.close)
        else:  # the member was never built: its followers fail the same build and wait again
            log.error("run %s ended before its member was built; its followers may hang",
                      run_id[:12])  # fmt: skip
    ranks.give_back(run_id)
