"""The sharded exchange's transport (swarm/exchange/sharded/transport.py) on the node's
services: the group's signed messages travel on the run's update topic (the update gossip's
validator hands them to the driver's sharded rounds), payloads are content-addressed tensors in
the node's store, fetched from the one peer that serves them and verified on arrival."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from peertrain.swarm.exchange.errors import FetchFailed

from ..errors import BudgetExceeded, TransferFailed


class PayloadStore(Protocol):
    """What this uses of update_exchange.py's `NodeTensors`."""

    async def publish(self, data: bytes) -> None: ...

    async def serve(self, owner: str, payload: bytes) -> bytes: ...

    async def fetch_payload(
        self, holders: Sequence[str], checksum: bytes, nbytes: int
    ) -> memoryview: ...

    def local_payload(self, checksum: bytes, nbytes: int) -> memoryview | None: ...


class NodeShardTransport:
    def __init__(self, tensors: PayloadStore, counted: Callable[..., None]) -> None:
        """`tensors`: opaque-byte payloads (`codec=None`) of the run's update topic;
        `counted(fetched=n)` hears of every payload fetched and `counted(published=n)` of every
        payload we serve (the run's update traffic, in and out)."""
        self.tensors, self.counted = tensors, counted

    async def broadcast(self, raw: bytes) -> None:
        await self.tensors.publish(raw)

    async def serve(self, payload: bytes) -> bytes:
        key = await self.tensors.serve("shard", payload)
        self.counted(published=len(payload))  # once, as an announced update counts once
        return key

    async def fetch(self, peer: str, key: bytes, nbytes: int) -> memoryview:
        """The payload in the memory it arrived in (no copy: it is a receive buffer that is
        not reused while anything refers to it, node/net/receive_buffers.py)."""
        held = self.tensors.local_payload(key, nbytes)  # ours (an owner's own slice): verified
        if held is not None:
            return held
        try:
            payload = await self.tensors.fetch_payload([peer], key, nbytes)
        except (TransferFailed, BudgetExceeded) as exc:
            raise FetchFailed(f"{peer[:12]}: {exc}") from exc
        self.counted(fetched=len(payload))
        return payload
