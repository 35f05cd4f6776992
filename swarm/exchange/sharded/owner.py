"""An owner's duties for one shard: gather every committed sender's slice, publish the partial
statistics, then write the shard of the aggregate for each attempt the group decides."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

import torch
import trio
from peertrain.protocol.errors import DecodeError
from peertrain.protocol.messages import Message
from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.aggregation.streaming import InputStatistics, UpdateSource
from peertrain.swarm.exchange.codec import Payload, ProtocolCodec

from .board import Board
from .decide import Decision
from .messages import ShardOutput, ShardStatistics, pack_floats
from .transport import FetchFailed, ShardTransport

log = logging.getLogger(__name__)

MAX_FETCHES = 8  # input slices in flight at once, per shard


class OwnedRound(Protocol):
    """What an owner uses of its member's round (round.py's `ShardedRound`)."""

    me: str
    group: Collection[str]
    board: Board
    transport: ShardTransport
    rule: Aggregator
    codec: ProtocolCodec
    patience: float
    commit_deadline: float
    compute: Callable[..., Awaitable[Any]]
    on_penalty: Callable[[str, str], None]

    async def publish(self, msg: Message) -> None: ...

    def mark(self, phase: str) -> None: ...

    async def decision(self, attempt: int) -> Decision: ...

    def statistics_of(self, shard: int) -> tuple[str, ShardStatistics] | None: ...

    def slice_source(self, shard: int, payload: bytes) -> UpdateSource: ...

    def write_shard(
        self, shard: int, decision: Decision, sources: dict[str, UpdateSource]
    ) -> torch.Tensor: ...


class ShardOwner:
    def __init__(self, round_: OwnedRound, shard: int, position: int) -> None:
        self.r, self.shard, self.position = round_, shard, position
        self.sources: dict[str, UpdateSource] = {}  # sender → its slice, checked

    async def run(self) -> None:
        r = self.r
        # every owner waits alike for the commitments; a backup then gives the owners before
        # it `patience` each to publish (counted from the commitments' wait, not from the
        # round's start: with a commit wait longer than the patience, backups published
        # beside their primary, members decided on different owners' statistics, and every
        # honest sender was blamed for the checks that followed: seen at 25M)
        await self._commitments()
        if self.position:  # a backup: only if the owners before us stay silent
            await trio.sleep(self.position * r.patience)
            if r.statistics_of(self.shard) is not None:
                return
        r.mark(f"shard {self.shard}: commitments in")
        await self._gather(r.board.committed())
        r.mark(f"shard {self.shard}: slices in")
        senders = sorted(self.sources)
        if not senders:
            return
        stats = await r.compute(self.statistics, [self.sources[s] for s in senders])
        await r.publish(
            ShardStatistics(
                shard=self.shard,
                senders=tuple(senders),
                sq_norms=pack_floats(stats.sq_norms),
                gram=b"" if stats.gram is None else pack_floats(stats.gram.flatten()),
            )
        )
        r.mark(f"shard {self.shard}: statistics sent")
        attempt = 0
        while True:
            decision = await r.decision(attempt)
            if decision.owners.get(self.shard) == r.me:
                await self._write(decision, attempt)
            attempt += 1

    async def _commitments(self) -> None:
        """Until every member's commitment is in, or the commit deadline. A member that left is
        waited for too: each member learns of a departure, and of a restart, at its own moment,
        and owners whose waits ended at different moments raced their backups (a 25M run's
        kill mid-round had members decide on different statistics); the wait is bounded by the
        commit deadline, one round's straggler allowance."""
        r = self.r
        await r.board.wait(lambda: len(r.board.committed()) == len(r.group), r.commit_deadline)

    async def _gather(self, senders: list[str]) -> None:
        limiter = trio.CapacityLimiter(MAX_FETCHES)
        async with trio.open_nursery() as nursery:
            for sender in senders:
                nursery.start_soon(self._fetch, sender, limiter)

    async def _fetch(self, sender: str, limiter: trio.CapacityLimiter) -> None:
        r = self.r
        commitment = r.board.commitments[sender]
        want, size = commitment.digests[self.shard], commitment.sizes[self.shard]
        async with limiter:
            try:
                payload = await r.transport.fetch(sender, want, size)
            except FetchFailed as exc:
                log.info("shard %d: no slice from %s: %s", self.shard, sender[:12], exc)
                return
        # fetched, it is served by us too: for a dispute, if the sender withholds it; checked
        # (decoded whole, for small slices or without the compiled kernel) off the event loop
        try:
            self.sources[sender] = await r.compute(r.slice_source, self.shard, payload)
        except DecodeError as exc:  # the bytes it signed for: out of our statistics, so out
            r.on_penalty(sender, f"its slice of shard {self.shard} does not decode: {exc}")
            log.info("shard %d: %s's slice does not decode: %s", self.shard, sender[:12], exc)

    def statistics(self, sources: list[UpdateSource]) -> InputStatistics:
        """The partial statistics we publish (a test's cheating owner overrides this)."""
        return self.r.rule.statistics(sources)

    def output(self, decision: Decision) -> torch.Tensor:
        """Our shard of the aggregate, fp32 (a test's cheating owner overrides this)."""
        return self.r.write_shard(self.shard, decision, self.sources)

    def encoded(self, decision: Decision) -> Payload:
        """Our shard of the aggregate as we serve it (a test's cheating owner overrides this)."""
        return self.r.codec.encode(self.output(decision))

    async def _write(self, decision: Decision, attempt: int) -> None:
        r = self.r
        if any(s not in self.sources for s in decision.senders):
            return  # decided on senders we do not hold: our statistics were not chosen
        payload = await r.compute(self.encoded, decision)
        key = await r.transport.serve(payload)
        await r.publish(
            ShardOutput(
                shard=self.shard,
                attempt=attempt,
                digest=key,
                nbytes=len(payload),
                decision=decision.digest,
            )
        )
        r.mark(f"shard {self.shard}: output sent")
