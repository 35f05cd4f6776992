"""A sharded run's update traffic is counted both ways: what we serve (once per payload, as an
announced update counts once) and what we fetch, so status, metrics and the dashboard show it."""

from __future__ import annotations

import trio
from peertrain.node.runs.shard_transport import NodeShardTransport
from peertrain.swarm.exchange.gossip import UpdateGossip


class Store:
    """The payload store, in memory: serves under the payload's hash, fetches what it serves."""

    def __init__(self) -> None:
        self.served: dict[bytes, bytes] = {}

    async def publish(self, data: bytes) -> None:
        pass

    async def serve(self, owner: str, payload: bytes) -> bytes:
        key = bytes([len(payload) % 256]) * 32
        self.served[key] = payload
        return key

    async def fetch_payload(self, holders, checksum: bytes, nbytes: int) -> memoryview:
        return memoryview(self.served[checksum])

    def local_payload(self, checksum: bytes, nbytes: int) -> None:
        return None


class Counts:
    def __init__(self) -> None:
        self.bytes_fetched = self.bytes_published = 0

    count = UpdateGossip.count  # the run's counters, as the node wires them


def test_what_we_serve_counts_as_sent_and_what_we_fetch_as_received():
    counts, store = Counts(), Store()
    shards = NodeShardTransport(store, counts.count)

    async def main() -> None:
        key = await shards.serve(b"x" * 1000)
        await shards.serve(b"y" * 300)
        await shards.fetch("peer", key, 1000)

    trio.run(main)
    assert (counts.bytes_published, counts.bytes_fetched) == (1300, 1000)
