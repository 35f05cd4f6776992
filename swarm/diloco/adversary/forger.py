"""A Byzantine DiLoCo member: an ordinary member whose outgoing update goes through an attack.

The member trains, aggregates and agrees like any other (swarm/attacks.py says why); only the
payload it publishes is forged, so robust aggregation is tested against the real code paths.
"""

from __future__ import annotations

import logging

import torch
from peertrain.swarm.diloco.member.member import DiLoCoMember

log = logging.getLogger(__name__)


class Forger:
    """Decodes our honest update, passes it through the named attack, encodes what is sent."""

    def __init__(self, name: str) -> None:
        from peertrain.swarm.attacks import build_attack

        log.warning("this member is Byzantine: its updates go through the %r attack", name)
        self.attack = build_attack(name)

    def forge(self, member: DiLoCoMember, payload: bytes, *, members: int) -> bytes:
        from peertrain.swarm.attacks import AttackContext

        codec, numel = member.encoder.codec, member.layout.numel
        honest = codec.decode(payload, numel)
        forged = self.attack(honest, AttackContext(num_workers=members, num_byzantine=1))
        if not torch.isfinite(forged).all():
            # what a NaN sender puts on the wire: receivers must refuse it
            return bytes([0xFF]) * len(payload)
        return codec.encode(forged)


GOSSIP_ATTACKS = ("announce-flood",)  # on the gossip itself (node/runs/announce_flood.py)


def build_forger(name: str | None, driver=None):
    """The forger of `--attack NAME`; None for an honest member (`honest`, or no name), or one
    whose attack is on state agreement, not on its updates (hostile_states.py). Free riders and
    `A/B@R` schedules: free_rider.py (`driver`: where a copier finds updates to copy)."""
    from peertrain.swarm.diloco.adversary.free_rider import (
        FREE_RIDES,
        FreeRider,
        Scheduled,
        parse_schedule,
    )
    from peertrain.swarm.diloco.adversary.hostile_states import STATE_ATTACKS

    if not name or name == "honest" or name in (*STATE_ATTACKS, *GOSSIP_ATTACKS):
        return None
    if (schedule := parse_schedule(name)) is not None:
        before, after, switch = schedule
        return Scheduled(build_forger(before, driver), build_forger(after, driver), switch)
    if name in FREE_RIDES:
        return FreeRider(name, driver)
    return Forger(name)
