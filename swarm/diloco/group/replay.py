"""Repairing a round by applying it again: no state download when only the update set differed.

A member keeps what its last round started from (θ_global, momentum, the state checksum) and the
updates it aggregated. When the trusted state of the next round differs from its own, and a
trusted signer's round record (round_record.py) starts from the same checksum and ends in the
trusted one, the member gathers the record's update set (its own copies where the checksums
match, the others fetched by the checksum their *senders* signed: a record names updates, it
does not vouch for them), rewinds, and applies the round again. Aggregation is a function of
the set, bit for bit (swarm/aggregation), so this lands on the trusted checksum; if it does not,
the driver downloads the state instead. The trusted state (RunState) may reach a member before
the signer's record (update gossip, repeated at gaps of up to `REPEAT_MAX`): the replay waits
for it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import torch
import trio
from peertrain.swarm.diloco.member.member import DiLoCoMember, RoundReport
from peertrain.swarm.exchange.gossip import REPEAT_WAIT, UpdateGossip
from peertrain.swarm.exchange.interface import Contribution
from peertrain.swarm.exchange.round_record import RecordedUpdate, RoundRecord

log = logging.getLogger(__name__)

# a trusted record lost to gossip comes again with its signer's next repeat
RECORD_WAIT = REPEAT_WAIT


@dataclass(frozen=True, slots=True)
class RoundStart:
    """What a round started from and what it aggregated: enough to apply it again."""

    round: int
    checksum: bytes
    params: torch.Tensor
    momentum: torch.Tensor
    contributions: tuple[Contribution, ...] = ()


class RoundReplay:
    """The last round of one member, kept to be applied again with another update set."""

    def __init__(self, gossip: UpdateGossip, thread: Callable[..., Awaitable]) -> None:
        self.gossip = gossip
        self.thread = thread  # the driver's torch thread (one torch job at a time)
        self.last: RoundStart | None = None

    def begin(self, member: DiLoCoMember, round_: int, checksum: bytes) -> None:
        self.last = RoundStart(
            round_, checksum, member.global_params.clone(), member.outer.momentum_buffer.clone()
        )

    def closed(self, contributions: Sequence[Contribution]) -> None:
        assert self.last is not None
        last = self.last
        self.last = RoundStart(
            last.round, last.checksum, last.params, last.momentum, tuple(contributions)
        )

    def record(self, report: RoundReport, result: bytes) -> RoundRecord:
        """Our signed statement of the round: from where, with which updates, to what."""
        assert self.last is not None
        judged = set(report.accepted) | {sender for sender, _ in report.rejected}
        updates = tuple(
            RecordedUpdate(sender=c.sender, checksum=c.checksum)
            for c in self.last.contributions
            if c.sender in judged and c.checksum
        )
        return RoundRecord(start=self.last.checksum, updates=updates, result=result)

    async def replay(self, member: DiLoCoMember, round_: int, trusted: bytes) -> RoundRecord | None:
        """Apply `round_` again from a trusted record ending in `trusted`; the record if applied
        (the caller checks the resulting checksum), else None."""
        last = self.last
        if last is None or last.round != round_:
            return None
        record = await self._trusted_record(round_, last.checksum, trusted)
        if record is None:
            return None
        contributions = await self._gather(round_, record, last)
        if contributions is None:
            return None
        await self.thread(member.rewind, round_, last.params, last.momentum)
        await self.thread(member.apply_update, contributions)
        log.info(
            "round %d applied again with the %d updates of its record", round_, len(contributions)
        )
        return record

    async def _trusted_record(self, round_: int, start: bytes, result: bytes) -> RoundRecord | None:
        """A trusted signer's record of `round_` from `start` to `result`, waiting up to
        `RECORD_WAIT` for it: the trusted state may be known here seconds before the record
        (seen: a member that lost its anchor's round to gossip found the anchor's state
        attested, no record yet, and downloaded the state at once)."""
        records = self.gossip.records
        with trio.move_on_after(RECORD_WAIT):
            while records.matching(round_, start=start, result=result) is None:  # noqa: ASYNC110 - records arrive in a sync validator, with no event to wait on
                await trio.sleep(0.1)
        return records.matching(round_, start=start, result=result)

    async def _gather(
        self, round_: int, record: RoundRecord, last: RoundStart
    ) -> list[Contribution] | None:
        """The record's updates: ours where the checksums match, the rest fetched by the
        checksum their senders signed. None if one cannot be had (or was never signed so)."""
        have = {c.sender: c for c in last.contributions}
        out = []
        for update in record.updates:
            known = have.get(update.sender)
            if known is not None and known.checksum == update.checksum:
                out.append(known)
                continue
            if await self.gossip.wait_signed_checksum(round_, update.sender) != update.checksum:
                log.info("round %d: no signed announcement of %s's update", round_, update.sender)
                return None
            try:
                payload = await self.gossip.fetch_update(round_, update.sender, holders=[])
            except Exception as exc:  # noqa: BLE001 - any transfer error: download the state instead
                log.info(
                    "round %d: %s's update not fetched for a replay: %r", round_, update.sender, exc
                )
                return None
            out.append(
                Contribution(sender=update.sender, payload=payload, checksum=update.checksum)
            )
        return sorted(out, key=lambda c: c.sender)
