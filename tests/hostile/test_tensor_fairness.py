"""Slow readers cannot lock the tensor service: a whole serve has a deadline, and a few greedy
peers cannot take the last slots, so a joiner is served while they read."""

from __future__ import annotations

import torch
import trio
from peertrain.node.api.control import call
from peertrain.node.services.tensor_fetch import fetch_tensor
from peertrain.node.services.tensors import TensorService
from peertrain.protocol.tensor_transfer import TensorRangeRequest
from peertrain.protocol.tensors import prepare_tensor
from peertrain.testing import open_test_swarm, wait_until
from peertrain.testing.attacks import Attacker

DEADLINE = 3.0


async def test_four_slow_readers_hold_no_slot_past_the_deadline_and_a_joiner_is_served(nursery):
    prepared = prepare_tensor("w", torch.randn(1 << 20), codec="fp32", chunk_size=1 << 16)
    ask_all = TensorRangeRequest(
        checksum=prepared.header.checksum, first_chunk=0, count=prepared.header.num_chunks
    )
    async with open_test_swarm(2) as (victim, joiner):
        await wait_until(lambda: len(victim.status()["peers"]) == 1, timeout=10)
        victim.tensor_store.put(prepared)
        service = TensorService(  # the daemon's own store and scoreboard, test-sized limits
            victim.host, victim.tensor_store, victim.scoreboard,
            max_total=8, max_per_peer=4, serve_deadline=DEADLINE, min_rate=16_000,
            idle_timeout=3.0,
        )  # fmt: skip
        await nursery.start(service.run)
        reports = []

        async def slow(seed: int) -> None:
            async with Attacker.open(seed=seed) as attacker:
                target = await attacker.connect(str(victim.addrs()[0]))
                reports.append(
                    await attacker.slow_reader(
                        target,
                        "/peertrain/tensor/1.0.0",
                        ask_all,
                        streams=4,
                        rate=40_000,
                        seconds=9,
                    )  # fmt: skip
                )

        async with trio.open_nursery() as attack:
            for seed in range(4):
                attack.start_soon(slow, seed)
            await trio.sleep(1.5)  # every slow stream has asked by now
            with trio.fail_after(6):  # 100 s per slow serve without a deadline
                download = await fetch_tensor(
                    joiner.host, [victim.host.get_id()], prepared.header.checksum,
                    max_nbytes=8 << 20, idle_timeout=5.0,
                )  # fmt: skip
            assert download.complete
        held = [seconds for report in reports for seconds in report.held]
        assert service.deadline_cuts >= 4 and held and max(held) < DEADLINE + 2.0
        status = await call(victim.config.control_socket, "status", timeout=5)
        assert joiner.status()["peer_id"] in status["peers"]
        assert victim.scoreboard.score(joiner.status()["peer_id"]) == 0
