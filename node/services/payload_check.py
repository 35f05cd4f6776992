"""Proof that a path between two daemons carries real data (NAT tests, benchmarks), behind two
control methods (node/api/control_methods.py checks their parameters):

    debug.offer {"mib": 16}                     → {"checksum": hex, "nbytes"}   random fp32 tensor
                                                  pinned in this node's tensor store
    debug.fetch {"peer": id, "checksum": hex}   → {"seconds", "mb_per_s", "connection", "how"}
                                                  resolve `peer` by its ID if not connected
                                                  (DHT, circuits), fetch and verify the tensor

A control call has 10 s (node/api/control.py): call `resolve_peer` first when the path is slow to
find, and `debug.offer` once on the fetching side too, so torch is loaded before the clock runs.

They go through the same code as model state does (node/services/tensors.py). Torch is imported
on first use, in a worker thread, so a daemon that never calls them stays light.
"""

from __future__ import annotations

import time
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID

from ..errors import ControlError, TransferFailed
from ..nat.relays import connection_kind
from .dht import DhtService
from .tensor_fetch import fetch_tensor
from .tensors import TensorStore

MAX_MIB = 256


async def offer(tensors: TensorStore, mib: int) -> dict[str, Any]:
    """A random fp32 tensor of `mib` MiB (1..MAX_MIB), pinned in `tensors`."""
    if not 1 <= mib <= MAX_MIB:
        raise ControlError(f"mib must be 1..{MAX_MIB}")
    prepared = await trio.to_thread.run_sync(_random_tensor, mib << 20)
    tensors.put(prepared, pin=True)
    return {"checksum": prepared.header.checksum.hex(), "nbytes": prepared.header.nbytes}


async def fetch(
    host: IHost, dht: DhtService, text: str, checksum_hex: str, *, timeout: float = 4.0
) -> dict[str, Any]:
    """Fetch and verify the tensor `checksum_hex` from the peer `text` (resolved within
    `timeout` when not connected): how long it took, and over what connection."""
    try:
        peer, checksum = ID.from_base58(text), bytes.fromhex(checksum_hex)
    except ValueError:
        raise ControlError("give a peer ID and a hex checksum") from None
    how = "connected"
    if not host.get_network().get_connections(peer):  # a control call has 10 s
        how = (await dht.resolve_peer(text, timeout=timeout))["how"]

    async def reconnect(holder: ID) -> None:  # a reset circuit, if nobody redialed it yet
        await dht.reconnect(holder)

    started = time.perf_counter()
    try:
        download = await fetch_tensor(
            host, [peer], checksum, max_nbytes=MAX_MIB << 20, reconnect=reconnect
        )
    except TransferFailed as exc:
        raise ControlError(str(exc)) from None
    seconds = time.perf_counter() - started
    nbytes = download.header.nbytes
    return {
        "nbytes": nbytes,
        "seconds": round(seconds, 4),
        "mb_per_s": round(nbytes / seconds / 1e6, 1),
        "connection": connection_kind(host, peer),
        "how": how,
    }


def _random_tensor(nbytes: int):
    import torch
    from peertrain.protocol.tensors import prepare_tensor

    return prepare_tensor("debug-payload", torch.rand(nbytes // 4), codec="fp32")
