"""The DiLoCo driver of a Streaming DiLoCo member: rounds of P fragment exchanges, never paused.

    catch up ──► StreamingLoop (thread): inner steps; fragment p due ─► update gossip of slot
                 (run, round·P + p) ─ τ steps later ─► outer step of p, mixed; a round's end
                 ─► (a copy of its state) ──► trio: publish + agree ─► next round's group, record,
                 checkpoint, while the thread computes the next round

Everything between rounds is the plain driver's (driver.py): counted group, catch-up, state
agreement, downloads, checkpoints; the shared state at a round's end is the member's whole
state in DiLoCoMember's form (streaming.py), so the same checks and stores apply. What differs:
each fragment's update is an ordinary update-gossip item whose gossip round is its slot (a slot
names run, round and fragment: fragments.py), so the validator, the counted group, the robust
rule and the norm bound apply to each fragment on its own; and compute does not stop at a
round's end. The loop copies the state when the round's last fragment has landed (nothing in
flight: the state every member agrees on), hands the copy over, and trains on; the driver
publishes and agrees on the copy meanwhile. The next round's group (whose updates count) is
known once that agreement is done, which its first exchange waits for on the network side,
not in compute. A state that differs from the trusted one halts the loop: the member rewinds
to its round's end copy and repairs by download (a round record names one update set, not P).

With `round_seconds` a round is a compute window: slot k is due k·round_seconds/P seconds into
it, whatever number of inner steps each member managed, and updates count by their samples.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
import trio
from peertrain.swarm.diloco.errors import CheckpointError
from peertrain.swarm.diloco.group.driver import AGREEMENT_WAIT, RETRY_PAUSE, DiLoCoDriver
from peertrain.swarm.diloco.group.streaming_loop import LoopStatistics, StreamingLoop
from peertrain.swarm.diloco.member.member import MemberState, RoundReport, rejection_kind
from peertrain.swarm.diloco.member.streaming import FragmentReport, StreamingMember
from peertrain.swarm.exchange.codec import Payload
from peertrain.swarm.exchange.interface import Contribution

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundEnd:
    """A round's end as the loop's thread saw it, for the driver to agree on."""

    round: int  # the round that ended
    reports: list[FragmentReport]
    steps: int  # inner steps since the last round's end
    compute: float  # seconds of torch work in them
    wall: float  # seconds since the last round's end, less the work at round ends
    state: torch.Tensor  # θ_global and outer momentum, as StateSync serves them
    snapshot: MemberState  # the whole state, for the checkpoint (and a rewind on a halt)
    checksums: list[str]  # per fragment
    loss: float  # of θ_global


class StreamingDriver(DiLoCoDriver):
    def __init__(self, *, slowdown: float = 1.0, **kwargs: Any) -> None:
        """`slowdown` (research/testing): every inner step takes this many times as long."""
        super().__init__(**kwargs)
        if self.adversary is not None and self.adversary.forges:
            log.warning("update attacks are not built for Streaming DiLoCo runs: sending honestly")
        fragments = self.spec.fragments
        # the gossip's rounds are slots: P per round, the group of a slot is its round's
        self.gossip.expected = lambda slot: self.group.expected(self.round_of(slot))
        self.gossip.window = 2 * fragments
        # a fragment's updates are checked when it lands (apply_fragment): the torch thread is
        # the loop's for the whole round, so nothing is handed to it as it arrives
        self.gossip.on_payload = None
        self.sync.first_exchange = lambda round_: round_ * fragments + 1
        self.loop = StreamingLoop(self.member, self._exchange_slot, limiter=self._limiter)
        self.loop.slowdown = slowdown
        self._groups: dict[int, frozenset[str]] = {}  # whose updates count, by round
        self._new_group = trio.Event()  # set (and replaced) when a round's group is known
        self._repair: tuple[int, bytes] | None = None  # (round, trusted state) after a halt
        self._mark: tuple[float, LoopStatistics] = (0.0, self.loop.statistics())
        self._last_end: MemberState | None = None  # the state at the last round's end
        self.fragment_checksums: list[str] = []
        self.samples: Counter[str] = Counter()  # counted samples by sender, over the run
        self.last_round: dict[str, Any] = {}  # this member's steps and samples, last round
        self.round_durations: list[float] = []  # seconds from a round's start to its agreement
        self.agree_seconds = 0.0  # publishing and agreeing on round ends (compute went on)

    @property
    def member(self) -> StreamingMember:  # type: ignore[override]
        return self.built.member  # type: ignore[return-value]

    def round_of(self, slot: int) -> int:
        return (slot - 1) // self.spec.fragments

    async def _exchange_slot(self, slot: int, payload: Payload) -> list[Contribution]:
        # whom the slot waits for is known once the last round's state is agreed (before, the
        # gossip would expect only those who announced that state yet: maybe only us)
        group = await self._group_of(self.round_of(slot))
        deadline = trio.current_time() + self.spec.round_timeout
        contributions = await self.gossip.exchange(slot, bytes(payload), deadline=deadline)
        return [c for c in contributions if c.sender in group]

    async def _group_of(self, round_: int) -> frozenset[str]:
        while round_ not in self._groups:
            await self._new_group.wait()
        return self._groups[round_]

    def _use_group(self, round_: int) -> None:
        """Whose updates count in `round_` (from the state agreed for it) and our data shard;
        the shard changes between two of the thread's steps."""
        group = self.group.of_round(round_, salt=self.sync.served or b"")
        self._groups = {r: g for r, g in self._groups.items() if r >= round_ - 1}
        self._groups[round_] = group
        shard = self.spec.shard_in(self.peer_id, set(group))
        self.loop.between_steps.put_nowait(functools.partial(self.built.use_shard, shard))
        new, self._new_group = self._new_group, trio.Event()
        new.set()

    async def _one_round(self) -> None:
        """Every round left (or until a repair), the thread never paused between two."""
        if self.trust.newest_round() > self.member.round and not await self.sync.catch_up():
            await trio.sleep(RETRY_PAUSE)  # the trusted state could not be had yet: again later
            return
        if self.finished:
            return
        first, self._repair = self.member.round, None
        self._use_group(first)
        self.progress.inner_start, self.progress.phase = self.member.inner.step, "inner steps"
        self._mark = (time.perf_counter(), self.loop.statistics())
        self._last_end = await self._thread(self.member.snapshot)  # between rounds here
        rounds = self.spec.rounds - first if self.spec.rounds else sys.maxsize
        send, ends = trio.open_memory_channel[RoundEnd](1)  # one round's end agreed at a time
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow, ends)
            async with send:
                await self.loop.run_rounds(
                    first, rounds, at_boundary=self._round_end, boundaries=send, **self._stride()
                )
        if self._repair is not None:  # halted: back to the last round's end, then repair
            await self._thread(self.member.restore, self._last_end)
            await self.sync.repair(*self._repair)
            self.fragment_checksums = await self._thread(self.member.fragment_hashes)

    def _round_end(self, round_: int) -> RoundEnd:
        """In the loop's thread, nothing in flight: the copies the driver agrees on."""
        now, stats = time.perf_counter(), self.loop.statistics()
        then, before = self._mark
        self._mark = (now, stats)
        member = self.member
        self._last_end = member.snapshot()
        self.progress.inner_start = member.inner.step
        return RoundEnd(
            round=round_,
            reports=self._take_reports(),
            steps=stats.steps - before.steps,
            compute=stats.compute_seconds - before.compute_seconds,
            wall=now - then - (stats.boundary_seconds - before.boundary_seconds),
            state=torch.cat([member.global_params, member.momentum_buffer]).float(),
            snapshot=self._last_end,
            checksums=member.fragment_hashes(),
            loss=self.built.eval_loss(),
        )

    def _take_reports(self) -> list[FragmentReport]:
        reports, self.loop.reports = self.loop.reports, []
        return reports

    async def _follow(self, ends: trio.MemoryReceiveChannel[RoundEnd]) -> None:
        """Agree on each round's end while the next computes; halt the loop on a divergence
        (a member left behind by the group diverges too: its late slots miss updates)."""
        async for end in ends:
            if self._repair is not None:
                continue  # halted: the rest of the run is redone after the repair
            agreeing = trio.current_time()
            report = self._account(end.round, end.reports, end.steps)
            self.replicator.writer.add_progress(end.steps)
            await self.sync.publish((end.round + 1, end.state))
            trusted = await self.sync.settle(end.round + 1, wait=AGREEMENT_WAIT)
            if trusted is not None and trusted != self.sync.served:
                self._repair = (end.round + 1, trusted)
                self.loop.halt()
                continue
            self.agree_seconds += trio.current_time() - agreeing
            self.round_durations = [*self.round_durations[-63:], end.wall]
            self.progress.timed(steps=end.steps, compute=end.compute, wall=end.wall)
            self.fragment_checksums = end.checksums
            self._use_group(end.round + 1)
            await self._record(report, loss=end.loss, round_=end.round + 1)
            await self._save(end.snapshot)

    async def _save(self, snapshot: MemberState) -> None:
        """Our copy of the agreed state, written off the torch thread (it is a copy)."""
        if self.checkpoints is None:
            return
        store = self.checkpoints
        try:
            await trio.to_thread.run_sync(
                lambda: store.save(snapshot, manifest_hash=self.state.run_id)
            )
        except CheckpointError as exc:  # no room (the disk budget): train on, say so
            log.warning("round %d: checkpoint not saved: %s", snapshot.round, exc)

    def _stride(self) -> dict[str, Any]:
        fragments = self.spec.fragments
        if self.spec.round_seconds:
            return {"stride_seconds": self.spec.round_seconds / fragments}
        return {"stride_steps": self.spec.inner_steps // fragments}

    def _account(self, round_: int, reports: list[FragmentReport], steps: int) -> RoundReport:
        """Counts of the round's P fragment reports (rejections, samples, trust) in one."""
        accepted = set().union(*(r.accepted for r in reports))
        rejected = [x for r in reports for x in r.rejected]
        self.roster.contributed(accepted)
        self.progress.rejected_updates += len(rejected)
        self.progress.rejected_by_reason.update(rejection_kind(why) for _, why in rejected)
        if not self.admission.invite:
            for sender in accepted:
                self.state.vouch(sender)  # counted in a round: never evicted from RunState
        counted: Counter[str] = Counter()
        for r in reports:
            counted.update(dict(r.samples))
        self.samples.update(counted)
        self.last_round = {
            "round": round_,
            "steps": steps,
            "samples": dict(sorted(counted.items())),
            "fragments_landed": len(reports),
        }
        return RoundReport(
            round=round_,
            inner=None,
            accepted=tuple(sorted(accepted)),
            rejected=tuple(rejected),
            payload_bytes=0,
            update_norm=math.nan,
            state_hash="",
        )

    def streaming_status(self) -> dict[str, Any]:
        """Status of the fragments: per-fragment round and checksum, samples counted by
        sender, and this member's last round."""
        member = self.member
        return {
            "fragments": self.spec.fragments,
            "overlap": self.spec.overlap,
            "round_seconds": self.spec.round_seconds,
            "fragment_states": [
                {"fragment": p, "round": member.rounds[p], "checksum": checksum[:16]}
                for p, checksum in enumerate(self.fragment_checksums)
            ],
            "samples_by_member": dict(sorted(self.samples.items())),
            "last_round": self.last_round,
            "round_durations": [round(s, 3) for s in self.round_durations],
            "loop": {**_loop_figures(self.loop), "agree_s": round(self.agree_seconds, 3)},
        }


def _loop_figures(loop: StreamingLoop) -> dict[str, Any]:
    stats = loop.statistics()
    return {
        "steps": stats.steps,
        "compute_s": round(stats.compute_seconds, 3),
        "idle_s": round(stats.idle_seconds, 3),
        "idle_fraction": round(stats.idle_fraction, 4),
        "late_s": round(stats.late_seconds, 3),  # of idle: exchanges later than τ steps
        "send_s": round(stats.send_seconds, 3),  # of idle: the outbox full
        "drain_s": round(stats.drain_seconds, 3),  # of late: still in flight at a round's end
        "handoff_s": round(stats.handoff_seconds, 3),  # of idle: the last round's end not taken
        "boundary_s": round(stats.boundary_seconds, 3),  # neither: copies and eval at round ends
    }
