"""One member's sharded round: robust aggregation where each member moves about 2·U bytes.

    commit ─► owners gather their shard of every input ─► partial statistics ─► decide (alike
    on every member) ─► owners write their shard of the aggregate ─► fetch every shard ─►
    reveal nonces, draw ρ ─► senders sign checks ─► verify; disputed shards recomputed

The maths is swarm/aggregation/sharded.py; the checks and why they suffice are in checks.py;
who owns a shard is owners.py. A member receives its shard of every input (U in all) and every
shard of the aggregate (U), and sends the same; the statistics are p × p per shard.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import trio
from libp2p.crypto.keys import KeyPair
from peertrain.protocol.envelope import seal
from peertrain.protocol.messages import Message, encode
from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.aggregation.sharded import Shard, plan_shards
from peertrain.swarm.aggregation.streaming import (
    UpdateSource,
    write_linear_combination,
)

from ..codec import Payload, ProtocolCodec
from .board import DOMAIN, Board
from .checks import sender_facts
from .decide import Decision, decide
from .messages import SenderChecks, ShardCommitment, ShardStatistics, digest, pack_floats
from .owner import ShardOwner
from .owners import owner_order
from .transport import ShardTransport


@dataclass
class ShardedResult:
    update: torch.Tensor  # the aggregate, decoded from every shard's output
    accepted: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...]  # (sender, why): refused by the rule's value checks
    weights: tuple[float, ...]
    attempts: int
    disputes: list[tuple[int, str, str]]  # (shard, blamed peer, why)


class RoundBuffers:
    """fp32 memory a member's rounds reuse (ShardedUpdates keeps one for all its rounds): the
    aggregate the outputs are decoded into, and a scratch for one of our own slices. Fresh
    memory every round cost its page faults every round (a 100M-value update: ~25 000 for the
    aggregate alone, more than decoding into it). The aggregate handed out by a round is valid
    until the next round starts (the driver applies it before)."""

    def __init__(self) -> None:
        self._aggregate = torch.empty(0)
        self._scratch = torch.empty(0)

    def aggregate(self, numel: int) -> torch.Tensor:
        if self._aggregate.numel() != numel:
            self._aggregate = torch.empty(numel)
        return self._aggregate

    def scratch(self, numel: int) -> torch.Tensor:
        if self._scratch.numel() < numel:
            self._scratch = torch.empty(numel)
        return self._scratch[:numel]

    def warm(self, numel: int, group: int) -> None:
        """Fault both in now (off the event loop), as a round of `group` members uses them."""
        self.aggregate(numel).zero_()
        self.scratch(max(s.stop - s.start for s in plan_shards(numel, group).shards)).zero_()


@dataclass
class ShardedRound:
    run_id: str
    round_: int
    me: str
    key_pair: KeyPair
    group: Sequence[str]  # the counted group: the same sorted list on every member
    transport: ShardTransport
    rule: Aggregator
    numel: int
    codec: ProtocolCodec = field(default_factory=lambda: ProtocolCodec("int8"))
    salt: bytes = b""
    patience: float = 5.0  # seconds a backup owner waits per owner ahead of it
    timeout: float = 60.0  # the whole round
    # seconds beyond `patience` (and `timeout`) the owners wait for commitments of members that
    # end their inner phase after us (round_pace.straggler_allowance)
    commit_wait: float = 0.0
    # trio time a counted member's first message of this round reached us (None: none before
    # we started it): the commit deadline counts from the round's first commitment, so that
    # members that started apart wait for commitments until about the same moment
    opened_at: float | None = None
    on_penalty: Callable[[str, str], None] = lambda peer, why: None
    reference: frozenset[str] = frozenset()  # whose norms bound the others' (anchors)
    # torch work off the event loop; the scale benchmark runs it inline under a mock clock
    compute: Callable[..., Awaitable[Any]] = trio.to_thread.run_sync
    buffers: RoundBuffers = field(default_factory=RoundBuffers)

    def __post_init__(self) -> None:
        self.group = sorted(self.group)
        self.plan = plan_shards(self.numel, len(self.group))
        self.board = Board(
            self.run_id,
            self.round_,
            frozenset(self.group),
            tuple(self.codec.payload_bytes(s.stop - s.start) for s in self.plan.shards),
            self.on_penalty,
        )
        self.mine: list[Payload] = []  # our slices' payloads, as the owners receive them
        self.fetched: dict[tuple[int, int], bytes] = {}  # (attempt, shard) → its output payload
        self._decisions: dict[int, Decision] = {}
        self._decided = trio.Event()
        self.commit_deadline = 0.0  # set when the round starts
        self.marks: list[tuple[str, float]] = []  # (phase, trio time it ended): where time goes

    def mark(self, phase: str) -> None:
        self.marks.append((phase, trio.current_time()))

    def output_buffer(self, shard: int) -> torch.Tensor:
        """Where shard `shard` of the aggregate is decoded: its place in one buffer of the
        whole vector, so the result needs no concatenating copy (100M values: a 400 MB copy,
        and its page faults, 1.2 s on the event loop at 25M under load)."""
        s = self.shards[shard]
        return self.buffers.aggregate(self.numel)[s.start : s.stop]

    def assemble(self, outputs: dict[int, torch.Tensor]) -> torch.Tensor:
        """The aggregate from every shard's output (copied into place unless decoded there)."""
        for k, out in outputs.items():
            place = self.output_buffer(k)
            if out.data_ptr() != place.data_ptr():
                place.copy_(out)
        return self.buffers.aggregate(self.numel)

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.plan.shards

    async def publish(self, msg: Message) -> None:
        env = seal(
            self.key_pair,
            domain=DOMAIN,
            run=self.run_id,
            round=self.round_,
            payload=self.board.tag + encode(msg),  # board.py: whose view of the group
        )
        raw = env.to_bytes()
        self.board.receive(raw)  # our own message counts for us as for everyone
        await self.transport.broadcast(raw)

    def slice_source(self, shard: int, payload: bytes) -> UpdateSource:
        s = self.shards[shard]
        return self.codec.source(payload, s.stop - s.start)

    def statistics_of(self, shard: int) -> tuple[str, ShardStatistics] | None:
        """(owner, statistics) of `shard` from the first owner in its order that published."""
        order = owner_order(self.group, shard, round_=self.round_, salt=self.salt)
        for owner in order:
            if (found := self.board.statistics.get((shard, owner))) is not None:
                return owner, found
        return None

    async def decision(self, attempt: int) -> Decision:
        while attempt not in self._decisions:
            await self._decided.wait()
        return self._decisions[attempt]

    def decide(
        self, attempt: int, parts: dict[int, tuple[str | None, ShardStatistics]]
    ) -> Decision:
        made = decide(self, attempt, parts)
        self._decisions[attempt] = made
        self._decided.set()
        self._decided = trio.Event()
        return made

    def write_shard(
        self, shard: int, decision: Decision, sources: dict[str, UpdateSource]
    ) -> torch.Tensor:
        s = self.shards[shard]
        out = torch.zeros(s.stop - s.start)  # nothing accepted: the round applies nothing
        if decision.weights.numel():
            chosen = [sources[p] for p in decision.accepted]
            write_linear_combination(chosen, decision.weights, out, chunk_size=self.rule.chunk_size)
        return out

    def local_output(
        self, shard: int, decision: Decision, sources: dict[str, UpdateSource]
    ) -> torch.Tensor:
        """Shard `shard` of the aggregate as its honest owner would have sent it (through the
        codec), written by us from its inputs."""
        out = self.write_shard(shard, decision, sources)
        return self.codec.decode(bytes(self.codec.encode(out)), out.numel())

    def my_checks(self, attempt: int, seed: bytes, outputs: dict) -> SenderChecks:
        """Our signed facts about our own slices: ⟨ρ_k, g_k⟩, ‖g_k‖², ⟨g_k, out_k⟩ per shard
        (a test's lying sender overrides this)."""
        projections, sq_norms, rows = [], [], []
        scratch = self.buffers.scratch(max(s.stop - s.start for s in self.shards))
        for k, payload in enumerate(self.mine):
            s = self.shards[k]
            g = self.codec.decode(payload, s.stop - s.start, scratch[: s.stop - s.start])
            projected, sq_norm, row = sender_facts(self.rule, seed, k, g, outputs.get(k))
            projections.append(projected)
            sq_norms.append(sq_norm)
            rows.append(row)
        return SenderChecks(
            attempt=attempt,
            projections=pack_floats(torch.tensor(projections)),
            sq_norms=pack_floats(torch.tensor(sq_norms)),
            rows=pack_floats(torch.tensor(rows)),
        )

    async def commit(self, update: Payload) -> bytes:
        """Serve the slices of our update (the codec's payload of the whole vector, as the
        member encoded it: its bytes are cut at the shards, not quantized again), commit to
        them; returns the nonce we reveal later."""
        digests, sizes = [], []
        for s in self.shards:
            payload = await self.compute(self.codec.slice, update, self.numel, s.start, s.stop)
            self.mine.append(payload)
            key = await self.transport.serve(payload)
            digests.append(key)
            sizes.append(len(payload))
        nonce = os.urandom(32)
        await self.publish(
            ShardCommitment(digests=tuple(digests), sizes=tuple(sizes), nonce_hash=digest(nonce))
        )
        return nonce

    def owner_tasks(self, nursery: trio.Nursery) -> None:
        for s in self.shards:
            order = owner_order(self.group, s.index, round_=self.round_, salt=self.salt)
            nursery.start_soon(self.owner(s.index, order.index(self.me)).run)

    def owner(self, shard: int, position: int) -> ShardOwner:
        """Our owner of `shard` (a test's cheating member returns its own kind)."""
        return ShardOwner(self, shard, position)
