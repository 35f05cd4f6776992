"""A stranger in a run's gossip: a flood of update announcements starts no download, and
forged or future-dated stamps move neither the run state nor an honest peer's score."""

from __future__ import annotations

import logging

from peertrain.node.api.control import call
from peertrain.testing import open_test_swarm, wait_until
from peertrain.testing.attacks import Attacker
from peertrain.testing.gossip_attacks import gossip_attacker

from ..node.test_run_supervision import SPEC  # a small run that trains on and on


async def test_announcement_floods_and_forged_stamps_leave_the_run_and_honest_peers_alone(caplog):
    caplog.set_level(logging.WARNING)
    async with open_test_swarm(2) as (victim, honest):
        await wait_until(lambda: len(victim.status()["peers"]) == 1, timeout=10)
        session = await victim.runs.create(name="target", mode="diloco", spec=SPEC)
        await wait_until(lambda: victim.status()["run"]["round"] >= 1, timeout=60)
        async with Attacker.open(seed=3) as attacker:
            await attacker.connect(str(victim.addrs()[0]))
            stranger = attacker.identity.peer_id.to_base58()
            async with gossip_attacker(attacker, session.run_id) as forger:
                flood = await forger.announcement_flood(
                    session.run_id, round_=victim.status()["run"]["round"], seconds=3
                )
                stamps = await forger.stamp_forgeries(
                    session.run_id, victim.status()["peer_id"], seconds=3
                )
        assert flood.attempts > 50 and stamps.attempts > 50
        run = victim.status()["run"]
        assert run["bytes_fetched"] == 0  # nothing pulled on a stranger's say
        assert stranger not in run["members"]  # its future-dated membership took no hold
        assert victim.scoreboard.score(stranger) > 0  # the forged write cost its signer
        status = await call(victim.config.control_socket, "status", timeout=5)
        assert status["run"]["error"] is None
        assert victim.scoreboard.score(honest.status()["peer_id"]) == 0
        round_before = status["run"]["round"]
        await wait_until(lambda: victim.status()["run"]["round"] > round_before, timeout=60)
