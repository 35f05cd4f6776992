"""Tensors move between real nodes by checksum, from several holders, surviving a lying one, and
resuming from the same holder when its connection is replaced mid-transfer."""

from __future__ import annotations

import pytest
import torch
import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from peertrain.node.errors import TransferFailed
from peertrain.node.services.tensor_fetch import fetch_tensor
from peertrain.node.services.tensors import TensorService, TensorStore
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
        download = await fetch_tensor(
            nodes[2].host,
            [nodes[0].host.get_id(), nodes[1].host.get_id()],
            prepared.header.checksum,
            max_nbytes=10 << 20,
        )
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
        download = await fetch_tensor(
            nodes[2].host,
            [liar_id, nodes[1].host.get_id()],
            prepared.header.checksum,
            max_nbytes=10 << 20,
            scoreboard=nodes[2].scoreboard,
        )
        assert torch.equal(download.finish(), tensor)
        assert nodes[2].scoreboard.score(liar_id.to_base58()) > 0


async def test_no_holder_means_a_clear_failure(nursery):
    async with open_test_swarm(2) as nodes:
        await wait_until(lambda: all(len(n.status()["peers"]) == 1 for n in nodes))
        await serve(nursery, nodes)
        with pytest.raises(TransferFailed, match="no holder"):
            await fetch_tensor(
                nodes[1].host, [nodes[0].host.get_id()], bytes(32), max_nbytes=1 << 20
            )


def test_the_store_evicts_least_recently_used_unpinned_tensors():
    store = TensorStore(max_bytes=3 * 4000)
    items = [prepare_tensor(f"t{i}", torch.randn(1000)) for i in range(4)]  # 4000 bytes each
    store.put(items[0], pin=True)
    for item in items[1:]:
        store.put(item)
    store.put(prepare_tensor("t4", torch.randn(1000)))
    assert store.get(items[0].header.checksum) is not None  # pinned survives
    assert store.get(items[1].header.checksum) is None  # oldest unpinned went first


async def _one_holder(nursery, nodes, prepared):
    """nodes[1] connected to nodes[0], which serves `prepared`; nodes[1] forgets nodes[0]'s
    addresses, as for a peer behind NAT: only whoever redials it can bring it back."""
    holder, fetcher = nodes[0].host, nodes[1].host
    await fetcher.connect(PeerInfo(holder.get_id(), holder.get_addrs()))
    service = TensorService(holder, TensorStore(), nodes[0].scoreboard)
    await nursery.start(service.run)
    service.store.put(prepared)
    fetcher.get_peerstore().clear_addrs(holder.get_id())
    return service


async def _cut_midway(fetcher, holder_id, buffer: torch.Tensor) -> None:
    """Close every connection to the holder once a quarter of the payload has arrived (one
    holder's ranges arrive in order), before the last bytes have."""
    mark = buffer.numel() // 4
    await wait_until(
        lambda: buffer[mark : mark + 64].any(),
        timeout=30,
        interval=0.001,
        what="a quarter of the payload arrived",
    )
    assert not buffer[-64:].any(), "the payload arrived before the cut: make it bigger"
    for conn in list(fetcher.get_network().get_connections(holder_id)):
        await conn.close()


async def test_a_download_resumes_from_the_same_holder_after_its_connection_is_replaced(nursery):
    tensor = torch.randn(8 << 20)  # 32 MiB
    prepared = prepare_tensor("w", tensor, codec="fp32", chunk_size=1 << 18)
    buffer = torch.zeros(prepared.header.nbytes, dtype=torch.uint8)
    async with open_test_swarm(2, bootstrap_first=False) as nodes:
        service = await _one_holder(nursery, nodes, prepared)
        holder, fetcher = nodes[0].host, nodes[1].host
        redialed = trio.Event()

        async def cut_and_redial() -> None:  # what hole punching does to a reset circuit
            await _cut_midway(fetcher, holder.get_id(), buffer)
            # the holder's auto-connector may redial us first (it knows our addresses): the
            # download must resume over whichever connection comes up
            await trio.sleep(0.5)
            await fetcher.connect(PeerInfo(holder.get_id(), holder.get_addrs()))
            redialed.set()

        nursery.start_soon(cut_and_redial)
        download = await fetch_tensor(
            fetcher,
            [holder.get_id()],
            prepared.header.checksum,
            max_nbytes=64 << 20,
            allocate=lambda _n: buffer,
        )
        # the download may resume over the holder's own redial and end before our dial returns
        # (seen once in a fresh-clone suite): the redial must still come up
        with trio.fail_after(60):
            await redialed.wait()
        assert torch.equal(download.finish(), tensor)
    # resumed, not restarted: the holder answered the header, the ranges once, and the range
    # the cut broke again (its verified chunks were kept)
    ranges = -(-prepared.header.num_chunks // 4)
    requests = service.bytes_served // prepared.header.nbytes
    assert ranges + 1 < requests <= ranges + 3, (requests, ranges)


async def test_a_holder_that_does_not_come_back_fails_the_download_in_bounded_time(nursery):
    tensor = torch.randn(8 << 20)
    prepared = prepare_tensor("w", tensor, codec="fp32", chunk_size=1 << 18)
    buffer = torch.zeros(prepared.header.nbytes, dtype=torch.uint8)
    async with open_test_swarm(2, bootstrap_first=False) as nodes:
        await _one_holder(nursery, nodes, prepared)
        holder, fetcher = nodes[0].host, nodes[1].host
        asked: list[ID] = []

        async def reconnect(peer: ID) -> None:  # e.g. resolve_peer: here, nothing reachable
            asked.append(peer)
            raise TransferFailed("unreachable")

        nursery.start_soon(_cut_midway, fetcher, holder.get_id(), buffer)
        started = trio.current_time()
        with pytest.raises(TransferFailed, match="could not fetch"):
            await fetch_tensor(
                fetcher,
                [holder.get_id()],
                prepared.header.checksum,
                max_nbytes=64 << 20,
                allocate=lambda _n: buffer,
                retries=2,
                reconnect_wait=1.5,
                reconnect=reconnect,
            )
        assert trio.current_time() - started < 2 * 1.5 + 2
        assert asked and set(asked) == {holder.get_id()}


def test_an_unpinned_tensor_unused_past_its_age_is_dropped_and_a_pinned_one_stays():
    """A run's rounds must not leave their updates behind until the byte bound: an hour-long
    soak's daemons grew 150-175 MB an hour that way with a 120k-parameter model."""
    now = [0.0]
    store = TensorStore(max_age=600.0, clock=lambda: now[0])
    old_update = store.put(prepare_tensor("u0", torch.ones(100)))
    state = store.put(prepare_tensor("s", torch.zeros(100)), pin=True)
    now[0] = 300.0
    asked = store.put(prepare_tensor("u1", torch.full((100,), 2.0)))
    now[0] = 599.0
    assert store.get(asked) is not None  # asked for: its age counts from now
    now[0] = 601.0
    newest = store.put(prepare_tensor("u2", torch.full((100,), 3.0)))
    assert store.get(old_update) is None  # unused for 601 s
    assert store.get(state) is not None and store.get(asked) is not None
    store.unpin(state)  # replaced by a newer state: it ages from its unpinning
    now[0] = 1300.0
    store.put(prepare_tensor("u3", torch.full((100,), 4.0)))
    assert store.get(state) is None and store.get(newest) is None
    assert store.statistics().tensors == 1
