"""Downloads are admitted against the daemon's receive memory: after the header's cheap checks,
before any buffer exists; refused when the budget (or one peer's share) is spent."""

from __future__ import annotations

import pytest
import torch
from peertrain.node.api.control import call
from peertrain.node.errors import BudgetExceeded
from peertrain.node.net.budget import BudgetLimits, ResourceBudget
from peertrain.node.services.tensor_fetch import fetch_tensor
from peertrain.node.services.tensors import TensorService
from peertrain.protocol.tensors import prepare_tensor
from peertrain.testing import open_test_swarm, wait_until

MiB = 1 << 20


async def _fetch(nodes, prepared, budget, allocated):
    def allocate(nbytes):
        allocated.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    return await fetch_tensor(
        nodes[1].host, [nodes[0].host.get_id()], prepared.header.checksum,
        max_nbytes=8 * MiB, budget=budget, allocate=allocate,
    )  # fmt: skip


async def _holding(nursery, nodes):
    """Node 0 serves a 1 MiB tensor to node 1."""
    prepared = prepare_tensor("w", torch.randn(MiB // 4), codec="fp32", chunk_size=1 << 16)
    await wait_until(lambda: len(nodes[1].status()["peers"]) == 1, timeout=10)
    service = TensorService(nodes[0].host, nodes[0].tensor_store, nodes[0].scoreboard)
    await nursery.start(service.run)
    nodes[0].tensor_store.put(prepared)
    return prepared


async def test_a_download_past_the_receive_memory_budget_is_refused_before_its_buffer(nursery):
    async with open_test_swarm(2) as nodes:
        prepared = await _holding(nursery, nodes)
        budget = nodes[1].budget  # the fetching daemon's own budget
        budget.limits = BudgetLimits(receive_memory=3 * MiB // 2, receive_memory_per_peer=2 * MiB)
        allocated: list[int] = []
        budget.reserve_memory("another download", MiB)  # in flight meanwhile
        with pytest.raises(BudgetExceeded, match="receive memory"):
            await _fetch(nodes, prepared, budget, allocated)
        assert allocated == []  # refused before a byte of buffer
        budget.release_memory("another download", MiB)
        download = await _fetch(nodes, prepared, budget, allocated)
        assert download.complete and allocated == [MiB]
        status = await call(nodes[1].config.control_socket, "status", timeout=5)
        assert status["budget"]["refused"]["receive_memory"] == 1
        assert status["budget"]["receive_memory"] == 0  # given back when the download ended
        assert nodes[1].scoreboard.score(nodes[0].status()["peer_id"]) == 0  # no holder blamed


async def test_one_peer_cannot_take_more_than_its_share(nursery):
    async with open_test_swarm(2) as nodes:
        prepared = await _holding(nursery, nodes)
        budget = ResourceBudget(BudgetLimits(receive_memory_per_peer=MiB // 2))
        with pytest.raises(BudgetExceeded, match="would hold over"):
            await _fetch(nodes, prepared, budget, [])
        assert budget.refused["receive_memory_per_peer"] == 1
