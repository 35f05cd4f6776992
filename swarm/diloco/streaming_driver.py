"""The DiLoCo driver of a Streaming DiLoCo member: a round is P fragment exchanges, overlapped.

    catch up ──► [ StreamingLoop: inner steps (thread) ─ fragment p due ─► update gossip of slot
                   (run, round·P + p) ─ τ steps later ─► outer step of p, mixed ] × P fragments
               ──► publish state + agree with the trusted state ──► checkpoint

Everything between two rounds is the plain driver's (driver.py): counted group, catch-up,
state agreement, downloads, checkpoints; the shared state at a round's end is the member's whole
state in DiLoCoMember's form (streaming.py), so the same checks and stores apply. What differs
is inside a round: each fragment's update is an ordinary update-gossip item whose gossip round
is its slot (a slot names run, round and fragment: fragments.py), so the validator, the counted
group, the robust rule and the norm bound apply to each fragment on its own. The round's last
fragment lands before the state is published (so every fragment is at one round): the overlap
runs within a round. Repair is by download: a round record names one update set, not P.

With `round_seconds` a round is a compute window: slot k is due k·round_seconds/P seconds into
it, whatever number of inner steps each member managed, and updates count by their samples.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import trio

from .compression import Payload
from .driver import AGREEMENT_WAIT, RETRY_PAUSE, DiLoCoDriver
from .exchange import Contribution
from .member import RoundReport, rejection_kind
from .streaming import FragmentReport, StreamingMember
from .streaming_loop import StreamingLoop

log = logging.getLogger(__name__)


class StreamingDriver(DiLoCoDriver):
    def __init__(self, *, slowdown: float = 1.0, **kwargs: Any) -> None:
        """`slowdown` (research/testing): every inner step takes this many times as long."""
        super().__init__(**kwargs)
        if self.forger is not None:
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
        self._group: frozenset[str] = frozenset({self.peer_id})
        self.fragment_checksums: list[str] = []
        self.samples: Counter[str] = Counter()  # counted samples by sender, over the run
        self.last_round: dict[str, Any] = {}  # this member's steps and samples, last round
        self.round_durations: list[float] = []  # seconds from a round's start to its agreement

    @property
    def member(self) -> StreamingMember:  # type: ignore[override]
        return self.built.member  # type: ignore[return-value]

    def round_of(self, slot: int) -> int:
        return (slot - 1) // self.spec.fragments

    async def _exchange_slot(self, slot: int, payload: Payload) -> list[Contribution]:
        deadline = trio.current_time() + self.spec.round_timeout
        contributions = await self.gossip.exchange(slot, bytes(payload), deadline=deadline)
        return [c for c in contributions if c.sender in self._group]

    async def _one_round(self) -> None:
        round_ = self.member.round
        if self.trust.newest_round() > round_ and not await self.sync.catch_up():
            await trio.sleep(RETRY_PAUSE)  # the trusted state could not be had yet: again later
            return
        if self.finished:
            return
        round_ = self.member.round
        self._group = self.group.of_round(round_, salt=self.sync.served or b"")
        self.built.use_shard(self.spec.shard_in(self.peer_id, set(self._group)))
        step = self.progress.inner_start = self.member.inner.step
        started, before = trio.current_time(), self.loop.statistics()
        self.progress.phase = "inner steps"
        await self.loop.run_slots(
            round_ * self.spec.fragments + 1, self.spec.fragments, **self._stride()
        )
        reports, self.loop.reports = self.loop.reports, []
        self.progress.phase = "agreeing"
        report = self._account(round_, reports, self.member.inner.step - step)
        self.replicator.writer.add_progress(self.member.inner.step - step)
        await self.sync.publish()
        await self.sync.agree(wait=AGREEMENT_WAIT)
        took, after = trio.current_time() - started, self.loop.statistics()
        self.round_durations = [*self.round_durations[-63:], took]
        compute = after.compute_seconds - before.compute_seconds
        self.progress.timed(steps=after.steps - before.steps, compute=compute, wall=took)
        self.fragment_checksums = await self._thread(self.member.fragment_hashes)
        await self._record(report)
        await self._save_checkpoint()

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
            "loop": _loop_figures(self.loop),
        }


def _loop_figures(loop: StreamingLoop) -> dict[str, Any]:
    stats = loop.statistics()
    return {
        "steps": stats.steps,
        "compute_s": round(stats.compute_seconds, 3),
        "idle_s": round(stats.idle_seconds, 3),
        "idle_fraction": round(stats.idle_fraction, 4),
    }
