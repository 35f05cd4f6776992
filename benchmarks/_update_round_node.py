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
from peertrain.swarm.exchange.payload_source import Admissions

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


class RoundCompute:
    """One node's compute of the round, as a DiLoCo member does it: encode its Δ with error
    feedback (`ErrorFeedbackEncoder`, built ahead as at join); each payload checked and measured
    as it arrives (`Admissions`, DiLoCoMember.admit), then `apply_contributions` (aggregate in
    place, outer Nesterov step on θ_global)."""

    def __init__(self, numel: int, seed: int, aggregator: str) -> None:
        import torch
        from peertrain.swarm.aggregation import build_aggregator
        from peertrain.swarm.aggregation.validation import RUN_MAX_NORM_RATIO
        from peertrain.swarm.diloco.member.config import OuterConfig
        from peertrain.swarm.diloco.member.outer_step import NesterovOuterOptimizer
        from peertrain.swarm.exchange.codec import ErrorFeedbackEncoder, ProtocolCodec

        self.numel = numel
        self.delta = torch.randn(numel, generator=torch.Generator().manual_seed(seed)).mul_(1e-3)
        t0 = time.perf_counter()
        self.encoder = ErrorFeedbackEncoder(ProtocolCodec(CODEC), numel)  # loads the kernels
        self.build_s = time.perf_counter() - t0
        options = {"r": None} if aggregator == "flag" else {}
        self.aggregator = build_aggregator(aggregator, max_norm_ratio=RUN_MAX_NORM_RATIO, **options)
        self.outer = NesterovOuterOptimizer(numel, OuterConfig())
        self.params = torch.zeros(numel)  # θ_global, the same on every node
        self.update = torch.zeros(numel)  # the member's reused aggregate buffer
        self.admissions = Admissions()

    def admit(self, sender: str, payload) -> None:
        self.admissions.admit(self.encoder.codec, self.numel, sender, payload)

    def encode(self):
        return self.encoder.encode(self.delta)

    def apply(self, contributions) -> float:
        from peertrain.swarm.diloco.member.member import apply_contributions

        accepted, rejected, norm = apply_contributions(
            contributions,
            codec=self.encoder.codec,
            aggregator=self.aggregator,
            outer=self.outer,
            params=self.params,
            out=self.update,
            admitted=self.admissions.take(),
        )
        if rejected or len(accepted) != len(contributions):
            raise RuntimeError(f"updates refused: {rejected}")
        return norm

    def floor(self, peers: int) -> dict[str, float]:
        """The round's unavoidable compute alone, on warm buffers, as every round after a
        session's first runs it: encode, then aggregate `peers` updates of this size and take
        the outer step (θ, momentum and residual are put back after, so every node starts the
        round from the same state).
        Also the encode as benchmarks/codec.py times it (the bare kernel into a faulted-in
        payload), to compare the member's encode with."""
        import torch
        from peertrain.protocol.error_feedback import ErrorFeedback
        from peertrain.swarm.exchange.interface import Contribution

        self.encode()  # a member's first encode of a session; every later round's is timed
        cpu0, t0 = time.process_time(), time.perf_counter()
        payload = self.encode()
        cpu1, t1 = time.process_time(), time.perf_counter()
        # the same payload under `peers` names: the same work as `peers` different ones
        contributions = [Contribution(sender=f"p{k}", payload=payload) for k in range(peers)]
        for c in contributions:  # in the round this overlaps the transfers; here it counts
            self.admit(c.sender, c.payload)
        self.apply(contributions)
        cpu2, t2 = time.process_time(), time.perf_counter()
        self.params.zero_()
        self.outer.momentum_buffer.zero_()
        self.encoder.residual.zero_()
        feedback, out = ErrorFeedback(codec=CODEC), torch.empty(len(payload), dtype=torch.uint8)
        feedback.encode("delta", self.delta, out=out)
        t3 = time.perf_counter()
        feedback.encode("delta", self.delta, out=out)
        return {
            "build_s": self.build_s,
            "encode_s": t1 - t0,
            "apply_s": t2 - t1,
            "floor_s": t2 - t0,
            "floor_cpu_s": cpu2 - cpu0,
            "encode_cpu_s": cpu1 - cpu0,
            "kernel_s": time.perf_counter() - t3,
        }

    def theta_digest(self) -> str:
        import hashlib

        return hashlib.blake2b(memoryview(self.params.numpy()), digest_size=8).hexdigest()


class BenchNode:
    """One daemon taking part in the round through the session's update exchange."""

    def __init__(
        self, daemon, numel: int, peers: int, aggregator: str = "mean", exchange: str = "gather"
    ):
        self.daemon, self.numel, self.peers = daemon, numel, peers
        self.aggregator, self.exchange_kind = aggregator, exchange
        self.sharded = None  # the sharded exchange's member side, with `--exchange sharded`
        self.phases: list[tuple[str, float]] = []  # the sharded round's phases, from its start
        self.me = daemon.identity.peer_id.to_base58()
        self.members: set[str] = {self.me}
        self.compute: RoundCompute | None = None
        self.floor_times: dict[str, float] = {}
        self.torch = trio.CapacityLimiter(1)  # the member's one torch worker, as in a session

    def listen_port(self) -> int:
        return int(re.search(r"/tcp/(\d+)", self.daemon.addrs()[0]).group(1))

    @asynccontextmanager
    async def joined(self, members: Iterable[str], seed: int) -> AsyncIterator[BenchNode]:
        """The member-side state, then the run's update exchange open as in a session (the
        encoder writing into its recycled buffers), the receive buffers faulted in."""
        from peertrain.swarm.exchange.codec import ProtocolCodec

        self.members = set(members)
        self.compute = await trio.to_thread.run_sync(
            RoundCompute, self.numel, seed, self.aggregator
        )
        from peertrain.node.net.loaded_code import freeze_what_is_loaded

        freeze_what_is_loaded()  # as a daemon's session does once torch and the gossip loaded
        async with open_update_exchange(
            self.daemon.services,
            run_id=RUN_ID,
            codec=ProtocolCodec(CODEC),
            numel=self.numel,
            is_member=lambda peer: True,
            expected=lambda round_: set(self.members),
            reserve_updates=len(self.members) - 1,
            encoder=self.compute.encoder,
            shard_group=len(self.members) if self.exchange_kind == "sharded" else 0,
            tensors_class=TimedTensors,
            transport_class=TimedTransport,
        ) as exchange:
            self.gossip, self.transport = exchange.gossip, exchange.gossip.transport
            if self.exchange_kind == "sharded":
                self._shard(exchange.shards)
            await exchange.reserved.wait()  # a session overlaps it with inner steps: not timed
            yield self

    def _shard(self, transport) -> None:
        """The sharded exchange on the session's shard transport, its fetches timed too."""
        from peertrain.swarm.diloco.group.sharded_updates import ShardedUpdates

        transport.tensors.events = self.transport.events
        transport.tensors.origin = self.transport.origin
        self.sharded = ShardedUpdates(
            run_id=RUN_ID,
            me=self.me,
            key_pair=self.daemon.identity.key_pair,
            transport=transport,
            rule=self.compute.aggregator,
            codec=self.compute.encoder.codec,
            numel=self.numel,
            leased=lambda peer: True,
            on_penalty=None,
        )
        self.gossip.shard_inbox = self.sharded.receive
        # faulted in before the round, as the gather's receive buffers are (a session's rounds
        # reuse them from the second on)
        self.sharded.buffers.warm(self.numel, self.peers)

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

    async def measure_floor(self) -> None:
        """The round's compute alone (RoundCompute.floor), before the round."""
        assert self.compute is not None
        self.floor_times = await trio.to_thread.run_sync(self.compute.floor, self.peers)
        self.gossip.on_payload = self._admit

    async def _admit(self, sender: str, payload) -> None:
        """As the session's driver does: in the member's torch thread, one job at a time."""
        assert self.compute is not None
        await trio.to_thread.run_sync(self.compute.admit, sender, payload, limiter=self.torch)

    async def exchange(self, start_at: float, deadline_s: float) -> dict[str, Any]:
        """The whole round: encode, the update exchange, aggregate + outer step."""
        compute = self.compute
        assert compute is not None
        await trio.sleep(max(0.0, start_at - time.monotonic()))
        self.transport.start_clock(start_at)
        payload = await trio.to_thread.run_sync(compute.encode, limiter=self.torch)
        encoded = time.monotonic() - start_at
        if self.sharded is not None:
            got, exchanged = await self._sharded_round(payload, start_at, deadline_s)
            contributions = sorted(got)
        else:
            contributions = await self.gossip.exchange(
                0, payload, deadline=trio.current_time() + deadline_s
            )
            exchanged = time.monotonic() - start_at
            got = {c.sender for c in contributions}
            if got == self.members:
                await trio.to_thread.run_sync(compute.apply, contributions, limiter=self.torch)
        done = time.monotonic() - start_at
        return {
            "peer": self.me,
            "encoded_s": encoded,
            "exchanged_s": exchanged,
            "done_s": done,
            "got": len(contributions),
            **self.floor_times,
            "events": list(self.transport.events),
            "bytes_fetched": self.gossip.bytes_fetched,
            "rejected": self.gossip.rejected,
            "missing": sorted(self.members - got),
            "links": self.remote_ports(),
            "phases": self.phases,
        }

    async def _sharded_round(self, payload, start_at: float, deadline_s: float):
        """Our update (as sent) in, the group's checked aggregate out, then the outer step."""
        compute, sharded = self.compute, self.sharded
        sharded.transport.tensors.origin = start_at  # its fetches on the round's clock
        result = await sharded.exchange(
            0, payload, group=self.members, reference=(), salt=b"", timeout=deadline_s
        )
        exchanged = time.monotonic() - start_at
        marks = sharded.last_marks
        self.phases = [(what, at - marks[0][1]) for what, at in marks]  # from the round's start
        if set(result.accepted) == self.members:
            await trio.to_thread.run_sync(
                compute.outer.step, compute.params, result.update, limiter=self.torch
            )
        return set(result.accepted), exchanged

    async def digest(self) -> dict[str, Any]:
        assert self.compute is not None
        return {"theta": await trio.to_thread.run_sync(self.compute.theta_digest)}

    def remote_ports(self) -> dict[str, list[int]]:
        """peer -> remote TCP ports of our connections to it (to name the kernel's sockets)."""
        out: dict[str, list[int]] = {}
        for peer, conns in self.daemon.host.get_network().connections.items():
            for conn in conns:
                addr = conn.muxed_conn.get_remote_address()
                if addr:
                    out.setdefault(peer.to_base58(), []).append(int(addr[1]))
        return out
