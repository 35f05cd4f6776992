"""Each DiLoCo member publishes where it stands in its own lease (swarm/diloco/group/lease.py):
every replica reads each member's round, state checksum, speed and name from the run state.
In-process drivers with real Replicators and signed deltas (peertrain.testing.diloco_drivers)."""

from __future__ import annotations

import trio
from peertrain.swarm.diloco.group.lease import Introduction
from peertrain.testing.diloco_drivers import open_driver_group
from peertrain.testing.waiting import wait_until

from .test_run_progress import SPEC


async def test_every_replica_reads_each_members_round_checksum_speed_and_name():
    async with open_driver_group(SPEC) as group:
        first = await group.member(group.creator)
        second = await group.member()
        first.driver.lease.introduction = Introduction("alice-gpu", "9.9.9")
        with trio.fail_after(120):
            await group.finished()
        drivers = {p.peer_id: p.driver for p in (first, second)}

        def reported() -> dict:
            state = second.replicator.state  # the second member's replica of everyone's
            return {peer: m.info.report for peer, m in state.members().items()}

        # a finished member's final state is told within a look (a second), not a renewal
        await wait_until(
            lambda: all(
                r is not None and r.checksum == drivers[p].progress.state_checksum
                for p, r in reported().items()
            ),
            timeout=5,
        )
        reports = reported()
    assert set(reports) == set(drivers)
    for peer, report in reports.items():
        assert report.round == SPEC.rounds == drivers[peer].progress.round
        assert report.samples_per_s > 0 and report.device == "cpu"
    assert reports[first.peer_id].checksum == reports[second.peer_id].checksum  # they agree
    assert reports[first.peer_id].name == "alice-gpu" and reports[first.peer_id].version == "9.9.9"
    assert reports[second.peer_id].name == ""
