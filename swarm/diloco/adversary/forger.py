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


def build_forger(name: str | None) -> Forger | None:
    """The forger of `--attack NAME`; None for an honest member, or one whose attack is on
    state agreement, not on its updates (hostile_states.py)."""
    from peertrain.swarm.diloco.adversary.hostile_states import STATE_ATTACKS

    return Forger(name) if name and name not in (*STATE_ATTACKS, *GOSSIP_ATTACKS) else None
