"""A round that would close with our own update alone while others are live.

Two ways lead there, and neither is a round of the group:

- the group closed the round without us: its signers attest the next round while we hold no
  update but ours. A member restarted mid-round misses the announcements published before it
  came back (gossip is not replayed to a newcomer; repeats come at gaps of up to 8 s), waits
  for them, sees the group attest the round, and aggregated its own update alone: for one
  round it served a model of its own, and `agree` repaired it afterwards (the churn run's
  "round closed with our own update alone" on a slow CI machine). The group's record of the
  round is applied instead (replay.py), or its state downloaded: no aggregate of ours alone is
  ever computed or served.
- nobody else's update came and nobody attested the round: we waited to the deadline (a
  partition, every peer frozen). The round closes and is counted and said (`ROUND_ALONE`):
  the local swarm and the soak count these from the log.

A round alone is no fault when nobody else is live, or when everyone else is a candidate on
probation (with scores, round 0 counts the anchors alone by design: every founder is on
probation, roster.py).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

ROUND_ALONE = "round_alone"  # the log event of a round closed alone (the local swarm counts it)


async def closed_without_us(driver: Any, round_: int, senders: list[str]) -> bool:
    """True if the group closed `round_` while we hold no update but ours: we then hold the
    group's state of the next round (replayed or downloaded), or try again next loop."""
    newest = driver.trust.newest_round()
    if newest <= round_ or any(sender != driver.peer_id for sender in senders):
        return False
    log.info("round %d was closed by the group without us: applying its record", round_)
    if driver.sharded is None:  # the gathered exchange's updates can be fetched and replayed
        await driver.sync.repair(newest, driver.trust.verdict(newest))
    else:
        await driver.sync.catch_up()
    driver.progress.round = driver.member.round
    return True


def count_alone(driver: Any, round_: int, senders: list[str]) -> None:
    """Count (and say) a round closed with our update alone while others are live."""
    waiting = driver.roster.probation
    others = [
        p
        for p in driver.state.members()
        if p != driver.peer_id and driver.state.is_live(p) and p not in waiting
    ]
    if others and all(sender == driver.peer_id for sender in senders):
        driver.progress.rounds_alone += 1
        log.warning(
            "round %d closed with our own update alone while %d other member(s) are live",
            round_,
            len(others),
            extra={"event": ROUND_ALONE},
        )
