"""A DiLoCo member says what it waits for and what it downloads (issue 18): in `progress` (the
daemon's status) and in log lines carrying the same figures. In-process drivers with real
Replicators and signed deltas (peertrain.testing.diloco_drivers)."""

from __future__ import annotations

import dataclasses
import logging

import trio
from peertrain.testing.diloco_drivers import open_driver_group
from peertrain.testing.waiting import wait_until

from .test_run_trust import SPEC as TRUST_SPEC

SPEC = dataclasses.replace(TRUST_SPEC, rounds=2, start_timeout=30)  # the trust tests' small run


def events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


async def test_a_member_alone_says_it_waits_for_one_more_then_trains_with_the_second(caplog):
    caplog.set_level(logging.INFO, logger="peertrain.swarm.diloco")
    async with open_driver_group(SPEC) as group:
        first = (await group.member(group.creator)).driver
        await wait_until(lambda: (first.progress_status()["waiting"] or {}).get("have") == 1)
        waiting = first.progress_status()["waiting"]
        assert waiting["what"] == "members" and waiting["need"] == 2
        await trio.sleep(1.5)  # progress is logged from a 1 s poll: a shorter wait may go unsaid
        await group.member()
        with trio.fail_after(120):
            await group.finished()
        final = first.progress_status()
    [line] = events(caplog, "waiting")[:1]
    assert line.getMessage().startswith("waiting for 1 more members (have 1, need 2), ")
    assert line.fields["need"] == 2 and line.fields["what"] == "members"
    assert final["phase"] == "finished" and final["waiting"] is None
    assert final["round"] == final["rounds"] == 2 and final["inner_steps"] == 4


async def test_a_joiner_logs_its_state_download_with_size_rate_and_donors(caplog):
    caplog.set_level(logging.INFO, logger="peertrain.swarm.diloco")
    spec = dataclasses.replace(SPEC, min_members=1)
    async with open_driver_group(spec) as group:
        await group.member(group.creator)
        with trio.fail_after(120):
            await group.finished()
        joiner = (await group.member()).driver
        with trio.fail_after(60):
            await group.finished()
        assert joiner.progress.state_downloads == 1 and joiner.downloads.current is None
    [done] = events(caplog, "download_done")
    numel = joiner.member.layout.numel
    assert done.fields["bytes_done"] == done.fields["bytes_total"] == 8 * numel
    assert (
        done.fields["donors"] == 1
        and done.fields["what"] == "state of round 2 (catching up from round 0)"
    )
    assert "from 1 donor(s)" in done.getMessage() and " MB/s" in done.getMessage()


async def test_a_member_serves_its_state_and_the_two_before_it_never_every_old_one():
    """Superseded states stay served a little (a joiner may be fetching the one the signers
    attested while ours moved on), then are dropped: left to the node's store, a small model's
    fast rounds kept 10 minutes of them (the soak's diffusion run: 2 MB a round)."""
    from peertrain.swarm.diloco.group.state_sync import KEEP_SUPERSEDED, STATE_NAME

    spec = dataclasses.replace(SPEC, rounds=8)
    async with open_driver_group(spec) as group:
        first = await group.member(group.creator)
        await group.member()
        with trio.fail_after(120):
            await group.finished()
        served = group.tensors.stores[first.peer_id].values()
        states = [p for p in served if p.header.name == STATE_NAME]
    assert first.driver.member.round == 8
    assert len(states) == 1 + KEEP_SUPERSEDED
