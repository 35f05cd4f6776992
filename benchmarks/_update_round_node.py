"""One node's part in benchmarks/update_round.py: the session's update exchange, with clocks.

`BenchNode.joined` opens the same `open_update_exchange` a DiLoCo session opens
(node/runs/update_exchange.py), passing `NodeTensors` / `UpdateTransport` subclasses that only
record when each serve, fetch, transfer and publish ran; nothing of the path is replaced.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio
from peertrain.node.runs.update_exchange import NodeTensors, UpdateTransport, open_update_exchange

RUN_ID = "bench-update-round"
CODEC = "int8"
SETUP_TIMEOUT = 120.0


class LogTally(logging.Handler):
    """Counts error records (libp2p logs failed streams there) and the foreign peers they name:
    other programs on this shared loopback sometimes dial ports our nodes reuse."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < 1000:
            self.records.append((time.monotonic(), record.getMessage()))

    def since(self, start: float, ours: set[str]) -> dict[str, Any]:
        texts = [text for at, text in self.records if at >= start]
        named = {m for t in texts for m in re.findall(r"12D3KooW[1-9A-HJ-NP-Za-km-z]+", t)}
        return {"log_errors": len(texts), "foreign_peers": sorted(named - ours)}


TALLY = LogTally()


# ---------------------------------------------------------------- clocks around the real transport


class TimedTensors(NodeTensors):
    """The session's NodeTensors; `fetch` (= fetch_tensor from the holders) is timed."""

    events: list[dict[str, Any]]
    origin: float

    async def fetch(self, holders, checksum: bytes, max_nbytes: int, **options: Any):
        t0 = time.monotonic()
        download = await super().fetch(holders, checksum, max_nbytes, **options)
        self.events.append(
            {
                "op": "transfer",
                "checksum": checksum.hex(),
                "holders": len(holders),
                "t0": t0 - self.origin,
                "t1": time.monotonic() - self.origin,
                "nbytes": download.header.nbytes,
            }
        )
        return download


class TimedTransport(UpdateTransport):
    """The session's `UpdateTransport`, recording when each serve / fetch / publish ran."""

    def __init__(self, tensors: TimedTensors):
        super().__init__(tensors)
        self.events = tensors.events = []
        self.origin = tensors.origin = time.monotonic()

    def start_clock(self, origin: float) -> None:
        self.origin = self.tensors.origin = origin

    async def _timed(self, op: str, call, **fields: Any):
        t0 = time.monotonic()
        try:
            result = await call
        except BaseException as exc:
            self._record(op, t0, error=repr(exc)[:300], **fields)
            raise
        self._record(op, t0, **fields)
        return result

    def _record(self, op: str, t0: float, **fields: Any) -> None:
        now = time.monotonic()
        self.events.append({"op": op, "t0": t0 - self.origin, "t1": now - self.origin, **fields})

    async def publish(self, data: bytes) -> None:
        await self._timed("publish", super().publish(data))

    async def serve(self, owner: str, payload: bytes) -> bytes:
        checksum = await self._timed("serve", super().serve(owner, payload), owner=owner)
        self.events[-1]["checksum"] = checksum.hex()
        return checksum

    async def fetch(self, holders, checksum: bytes, nbytes: int) -> bytes:
        return await self._timed(
            "fetch",
            super().fetch(holders, checksum, nbytes),
            checksum=checksum.hex(),
            holders=len(holders),
        )


# ---------------------------------------------------------------- one node's part


def encode_update(numel: int, seed: int) -> tuple[bytes, dict[str, float]]:
    """A random pseudo-gradient, int8 + error feedback encoded as a member does; (payload, s).

    Seconds: "build_s" to build the encoder (which loads the compiled kernel: before it did, that
    load was inside the first encode), "encode_s" the member's encode, and "kernel_s" the same
    encode as benchmarks/codec.py times it (into a payload already faulted in), for comparison.
    """
    import torch
    from peertrain.protocol.error_feedback import ErrorFeedback
    from peertrain.swarm.diloco.compression import ErrorFeedbackEncoder, ProtocolCodec

    delta = torch.randn(numel, generator=torch.Generator().manual_seed(seed)).mul_(1e-3)
    t0 = time.perf_counter()
    encoder = ErrorFeedbackEncoder(ProtocolCodec(CODEC), numel)
    t1 = time.perf_counter()
    payload = encoder.encode(delta)
    t2 = time.perf_counter()
    feedback, out = ErrorFeedback(codec=CODEC), torch.empty(len(payload), dtype=torch.uint8)
    feedback.encode("delta", delta, out=out)
    t3 = time.perf_counter()
    feedback.encode("delta", delta, out=out)
    seconds = {"build_s": t1 - t0, "encode_s": t2 - t1, "kernel_s": time.perf_counter() - t3}
    return payload, seconds


def decode_check(payload: bytes, numel: int) -> tuple[float, bool]:
    """Decode one received update as aggregation will; (seconds, all values finite)."""
    import torch
    from peertrain.swarm.diloco.compression import ProtocolCodec

    t0 = time.perf_counter()
    values = ProtocolCodec(CODEC).decode(payload, numel)
    return time.perf_counter() - t0, bool(torch.isfinite(values).all())


class BenchNode:
    """One daemon taking part in the round through the session's update exchange."""

    def __init__(self, daemon, numel: int, peers: int):
        self.daemon, self.numel, self.peers = daemon, numel, peers
        self.me = daemon.identity.peer_id.to_base58()
        self.members: set[str] = {self.me}
        self.payload: bytes | None = None
        self.encode_s = 0.0
        self.encode_times: dict[str, float] = {}
        self.received: dict[str, bytes] = {}

    def listen_port(self) -> int:
        return int(re.search(r"/tcp/(\d+)", self.daemon.addrs()[0]).group(1))

    @asynccontextmanager
    async def joined(self, members: Iterable[str]) -> AsyncIterator[BenchNode]:
        """The run's update exchange, open as in a session, its receive buffers faulted in."""
        from peertrain.swarm.diloco.compression import ProtocolCodec

        self.members = set(members)
        async with open_update_exchange(
            self.daemon.services,
            run_id=RUN_ID,
            codec=ProtocolCodec(CODEC),
            numel=self.numel,
            is_member=lambda peer: True,
            expected=lambda round_: set(self.members),
            reserve_updates=len(self.members) - 1,
            tensors_class=TimedTensors,
            transport_class=TimedTransport,
        ) as exchange:
            self.gossip, self.transport = exchange.gossip, exchange.gossip.transport
            await exchange.reserved.wait()  # a session overlaps it with inner steps: not timed
            yield self

    async def wait_connected(self) -> None:
        # an announcement published before the gossipsub mesh forms (next heartbeat) is lost
        from peertrain.testing import wait_until

        gossip, want, topic = (
            self.daemon.gossip,
            min(self.peers - 1, 4),
            self.transport.tensors.topic,
        )
        await wait_until(
            lambda: (
                len(gossip.topic_peers(topic)) >= self.peers - 1
                and len(gossip.router.mesh.get(topic, ())) >= want
            ),
            timeout=SETUP_TIMEOUT,
        )

    async def encode(self, seed: int) -> None:
        self.payload, self.encode_times = await trio.to_thread.run_sync(
            encode_update, self.numel, seed
        )
        self.encode_s = self.encode_times["encode_s"]

    async def exchange(self, start_at: float, deadline_s: float) -> dict[str, Any]:
        await trio.sleep(max(0.0, start_at - time.monotonic()))
        self.transport.start_clock(start_at)
        payload, self.payload = self.payload, None
        contributions = await self.gossip.exchange(
            0, payload, deadline=trio.current_time() + deadline_s
        )
        done = time.monotonic() - start_at
        self.received = {c.sender: c.payload for c in contributions}
        return {
            "peer": self.me,
            "done_s": done,
            "got": len(contributions),
            **self.encode_times,
            "events": list(self.transport.events),
            "bytes_fetched": self.gossip.bytes_fetched,
            "rejected": self.gossip.rejected,
            "missing": sorted(self.members - set(self.received)),
            "links": self.remote_ports(),
        }

    async def check_one(self) -> dict[str, Any]:
        other = next((p for s, p in self.received.items() if s != self.me), None)
        self.received = {}
        if other is None:
            return {}
        seconds, finite = await trio.to_thread.run_sync(decode_check, other, self.numel)
        return {"decode_s": seconds, "decoded_finite": finite}

    def remote_ports(self) -> dict[str, list[int]]:
        """peer -> remote TCP ports of our connections to it (to name the kernel's sockets)."""
        out: dict[str, list[int]] = {}
        for peer, conns in self.daemon.host.get_network().connections.items():
            for conn in conns:
                addr = conn.muxed_conn.get_remote_address()
                if addr:
                    out.setdefault(peer.to_base58(), []).append(int(addr[1]))
        return out
