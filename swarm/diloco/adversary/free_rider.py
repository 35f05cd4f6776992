"""Members that want to count without working: what contribution scores must tell apart.

    zero    sends the zero update (trains, and throws the work away)
    copy    sends another member's update of the last round, as if it were its own
    random  (swarm/attacks.py) a random direction with an honest update's norm: cheap noise

`A/B@R` (e.g. `zero/scaled@10`, `honest/sign-flip-10@10`) behaves as A until round R, then as
B: the patient Sybil, who earns a place first and attacks with every ID at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
from peertrain.swarm.diloco.member.member import DiLoCoMember

if TYPE_CHECKING:
    from peertrain.swarm.diloco.group.driver import DiLoCoDriver

log = logging.getLogger(__name__)

FREE_RIDES = ("zero", "copy")


class FreeRider:
    def __init__(self, name: str, driver: DiLoCoDriver | None) -> None:
        self.name, self.driver = name, driver
        log.warning("this member free-rides: it sends %s updates", name)

    def forge(self, member: DiLoCoMember, payload: bytes, *, members: int) -> bytes:
        codec, numel = member.encoder.codec, member.layout.numel
        if self.name == "copy" and (copied := self._copied(member)) is not None:
            return copied
        return codec.encode(torch.zeros(numel))  # zero, or a copier with nothing to copy yet

    def _copied(self, member: DiLoCoMember) -> bytes | None:
        last = self.driver.replay.last if self.driver is not None else None
        if last is None:
            return None
        me = self.driver.peer_id if self.driver is not None else ""
        others = sorted((c for c in last.contributions if c.sender != me), key=lambda c: c.sender)
        return others[member.round % len(others)].payload if others else None


class Scheduled:
    """`A/B@R`: the forger of A (None: honest) before round R, of B from R on."""

    def __init__(self, before, after, switch: int) -> None:
        self.before, self.after, self.switch = before, after, switch

    def forge(self, member: DiLoCoMember, payload: bytes, *, members: int) -> bytes:
        forger = self.before if member.round < self.switch else self.after
        if forger is None:
            return payload
        return forger.forge(member, payload, members=members)


def parse_schedule(name: str) -> tuple[str, str, int] | None:
    """("A", "B", R) of `A/B@R`, or None when `name` is no schedule."""
    if "/" not in name or "@" not in name:
        return None
    pair, _, at = name.rpartition("@")
    before, _, after = pair.partition("/")
    if not (before and after and at.isdigit()):
        raise ValueError(f"an attack schedule reads A/B@ROUND, not {name!r}")
    return before, after, int(at)
