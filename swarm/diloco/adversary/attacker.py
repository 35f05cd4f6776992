"""`--attack NAME` as the driver's `Adversary`: forged updates, hostile state claims, or both
off for an attack the driver never sees (the gossip flood is the node's, node/runs/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio
from peertrain.swarm.diloco.adversary.forger import Forger, build_forger
from peertrain.swarm.diloco.adversary.free_rider import FreeRider, Scheduled
from peertrain.swarm.diloco.adversary.hostile_states import HostileStates, hostile_states
from peertrain.swarm.diloco.group.driver import DiLoCoDriver
from peertrain.swarm.diloco.member.member import DiLoCoMember


@dataclass(slots=True)
class Attacker:
    forger: Forger | FreeRider | Scheduled | None
    hostile: HostileStates | None

    @property
    def forges(self) -> bool:
        return self.forger is not None

    def forge(self, member: DiLoCoMember, payload: bytes, *, members: int) -> bytes:
        if self.forger is None:
            return payload
        return self.forger.forge(member, payload, members=members)

    async def run(self) -> None:
        if self.hostile is not None:
            await self.hostile.run()
        else:
            await trio.sleep_forever()  # nothing to do beside the member; ends with the driver


def adversary_for(attack: str | None) -> Callable[[DiLoCoDriver], Attacker] | None:
    """The attacker of `--attack NAME` for a driver; None for an honest member."""
    if not attack:
        return None
    return lambda driver: Attacker(build_forger(attack, driver), hostile_states(attack, driver))
