"""The seam a simulated attacker plugs into (swarm/diloco/adversary/, `--attack NAME`): the
driver calls these two methods and never imports attack code, so what runs in production is
the same driver the attack tests exercise."""

from __future__ import annotations

from typing import Protocol

from peertrain.swarm.diloco.member.member import DiLoCoMember


class Adversary(Protocol):
    """What a simulated attacker adds to an otherwise ordinary member."""

    forges: bool  # whether `forge` changes our updates (Streaming DiLoCo never calls it)

    def forge(self, member: DiLoCoMember, payload: bytes, *, members: int) -> bytes: ...

    async def run(self) -> None:
        """Runs beside the member (state claims); returns or sleeps when there are none."""
        ...
