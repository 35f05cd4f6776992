"""Tensors move between real nodes by checksum, from several holders, surviving a lying one."""

from __future__ import annotations

import pytest
import torch
from peertrain.node.tensor_service import TensorService, TensorStore, TransferFailed, fetch_tensor
from peertrain.protocol.tensors import PreparedTensor, prepare_tensor
from peertrain.testing import open_test_swarm, wait_until

CHUNK = 1 << 16  # small chunks so a 1 MB tensor spans many


async def serve(nursery, nodes):
    stores = []
    for node in nodes:
        store = TensorStore()
        await nursery.start(TensorService(node.host, store, node.scoreboard).run)
        stores.append(store)
    return stores


async def test_a_tensor_is_fetched_from_several_holders_and_verified(nursery):
    tensor = torch.randn(300_000)
    prepared = prepare_tensor("w", tensor, codec="int8", chunk_size=CHUNK)
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes))
        stores = await serve(nursery, nodes)
        stores[0].put(prepared)
        stores[1].put(prepared)
        download = await fetch_tensor(nodes[2].host, [nodes[0].host.get_id(), nodes[1].host.get_id()],
                                      prepared.header.checksum, max_nbytes=10 << 20)
        decoded = download.finish()
    assert torch.linalg.norm(decoded - tensor) / torch.linalg.norm(tensor) < 0.01


async def test_a_lying_holder_is_dropped_penalised_and_the_download_completes(nursery):
    tensor = torch.randn(200_000)
    prepared = prepare_tensor("w", tensor, codec="fp32", chunk_size=CHUNK)
    corrupt_payload = prepared.payload.clone()
    corrupt_payload[7::CHUNK] ^= 0xFF  # every chunk is wrong at the liar, whichever range it serves
    liar = PreparedTensor(header=prepared.header, payload=corrupt_payload)
    async with open_test_swarm(3) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 2 for n in nodes))
        stores = await serve(nursery, nodes)
        stores[0].put(liar)
        stores[1].put(prepared)
        liar_id = nodes[0].host.get_id()
        download = await fetch_tensor(nodes[2].host, [liar_id, nodes[1].host.get_id()], prepared.header.checksum,
                                      max_nbytes=10 << 20, scoreboard=nodes[2].scoreboard)
        assert torch.equal(download.finish(), tensor)
        assert nodes[2].scoreboard.score(liar_id.to_base58()) > 0


async def test_no_holder_means_a_clear_failure(nursery):
    async with open_test_swarm(2) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 1 for n in nodes))
        await serve(nursery, nodes)
        with pytest.raises(TransferFailed, match="no holder"):
            await fetch_tensor(nodes[1].host, [nodes[0].host.get_id()], bytes(32), max_nbytes=1 << 20)


def test_the_store_evicts_least_recently_used_unpinned_tensors():
    store = TensorStore(max_bytes=3 * 4000)
    items = [prepare_tensor(f"t{i}", torch.randn(1000)) for i in range(4)]  # 4000 bytes each
    store.put(items[0], pin=True)
    for item in items[1:]:
        store.put(item)
    store.put(prepare_tensor("t4", torch.randn(1000)))
    assert store.get(items[0].header.checksum) is not None  # pinned survives
    assert store.get(items[1].header.checksum) is None  # oldest unpinned went first
