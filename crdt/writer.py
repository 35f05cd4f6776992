"""`RunWriter`: a peer's own writes to the run state, each returning the delta to replicate.

Every method writes only this peer's slots, applies the write to the local `RunState`, and
hands the delta to `on_delta` (the `Replicator` batches and signs it). Writes are synchronous
and cheap, so the training loop can call them from the event loop.

A (re)started peer should first pull state (`Replicator.bootstrap`): peers hold its earlier
slots, signed by itself, and writing before learning them would restart its counters and
sequence numbers below what others already saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from libp2p.crypto.keys import KeyPair

from .admission import revocation_evidence
from .certificates import sign_revocation
from .hlc import HybridClock
from .member_report import MemberReport
from .orset import AWORSet
from .records import BanVote, CheckpointRef, MemberInfo
from .rundoc import RunDoc
from .runstate import RunState
from .scorecard import ScoreCard


class RunWriter:
    """This peer's writes: membership lease, progress, checkpoint announcements, ban votes."""

    def __init__(
        self,
        state: RunState,
        peer_id: str,
        *,
        clock: HybridClock | None = None,
        on_delta: Callable[[RunDoc], None] | None = None,
        key_pair: KeyPair | None = None,
    ) -> None:
        self.state = state
        self.key_pair = key_pair  # signs our revocations (invite runs' creator and admins)
        self.peer_id = peer_id
        self.clock = clock or HybridClock(
            peer_id, wall_ms=state.wall_ms, max_drift_ms=state.limits.max_drift_ms
        )
        self.on_delta = on_delta

    def announce(
        self,
        *,
        role: str,
        addrs: Sequence[str],
        throughput: float = 0.0,
        lease_ms: int,
        certificate: bytes = b"",
        loss: float | None = None,
        report: MemberReport | None = None,
    ) -> RunDoc:
        """Join or renew: our member record, valid for `lease_ms` from now (with our member
        certificate in invite runs, and where we stand: `report`, crdt/member_report.py)."""
        if not 0 < lease_ms <= self.state.limits.max_lease_ms:
            raise ValueError(f"lease must be 1..{self.state.limits.max_lease_ms} ms")
        stamp = self.clock.now()
        info = MemberInfo(
            role=role,
            addrs=tuple(addrs),
            throughput=float(throughput),
            lease_expiry_ms=stamp.wall_ms + lease_ms,
            certificate=certificate,
            loss=loss,
            report=report,
        )
        return self._write(lambda d: RunDoc.of(members=d.members.set(self.peer_id, info, stamp)))

    def leave(self) -> RunDoc:
        """End our lease now (others stop counting us; nobody else could have done it)."""
        current = self.state.member(self.peer_id)
        if current is None:
            return RunDoc()
        stamp = self.clock.now()
        info = MemberInfo(
            role=current.info.role,
            addrs=current.info.addrs,
            throughput=current.info.throughput,
            lease_expiry_ms=stamp.wall_ms - 1,
            certificate=current.info.certificate,
        )
        return self._write(lambda d: RunDoc.of(members=d.members.set(self.peer_id, info, stamp)))

    def add_progress(self, amount: int) -> RunDoc:
        return self._write(lambda d: RunDoc.of(progress=d.progress.increment(self.peer_id, amount)))

    def publish_scores(self, card: ScoreCard) -> RunDoc:
        """Our score card (crdt/scorecard.py), replacing the one before."""
        stamp = self.clock.now()
        return self._write(lambda d: RunDoc.of(scores=d.scores.set(self.peer_id, card, stamp)))

    def provide_checkpoint(self, round: int, content_hash: bytes) -> RunDoc:
        ref = CheckpointRef(round=round, content_hash=content_hash)
        return self._write(
            lambda d: RunDoc.of(
                checkpoints=d.checkpoints.add(self.peer_id, ref, **self._fresh(d.checkpoints))
            )
        )

    def withdraw_checkpoint(self, round: int, content_hash: bytes) -> RunDoc:
        ref = CheckpointRef(round=round, content_hash=content_hash)
        return self._write(
            lambda d: RunDoc.of(checkpoints=d.checkpoints.remove(ref, replica=self.peer_id))
        )

    def vote_ban(self, peer: str, evidence: bytes) -> RunDoc:
        vote = BanVote(peer=peer, evidence=evidence)
        return self._write(
            lambda d: RunDoc.of(bans=d.bans.add(self.peer_id, vote, **self._fresh(d.bans)))
        )

    def revoke(self, peer: str) -> RunDoc:
        """Invite runs: end `peer`'s membership (we must be the creator or an admin; replicas
        check that, crdt/admission.py). With our key, a signed revocation joins the run's set,
        which every replica keeps whole (crdt/revocations.py; `StateFull` past our quota,
        `NotAdmitted` if we may not revoke); our ban vote with revocation evidence carries it
        by gossip at once too."""
        revocations = self.state.revocations
        if self.key_pair is not None and revocations is not None:
            mine = self.state.member(self.peer_id)
            raw = sign_revocation(
                self.key_pair,
                self.state.run_id,
                peer,
                issued_ms=self.state.wall_ms(),
                issuer_certificate=b""
                if revocations.creator == self.peer_id or mine is None
                else mine.info.certificate,
            )
            self.state.add_revocations([raw], strict=True)  # refused with its reason, if so
        return self.vote_ban(peer, revocation_evidence(self.state.run_id, peer))

    def withdraw_ban(self, peer: str) -> RunDoc:
        votes = [
            v for r, _, v in self.state.doc.bans.entries() if r == self.peer_id and v.peer == peer
        ]

        def mutate(d: RunDoc) -> RunDoc:
            delta = RunDoc()
            for vote in votes:
                delta.merge(RunDoc.of(bans=d.bans.remove(vote, replica=self.peer_id)))
            return delta

        return self._write(mutate)

    def _fresh(self, orset: AWORSet[Any]) -> dict[str, int]:
        """Our first dot in a set we know nothing of ourselves: start at the wall clock.

        A restarted peer that writes before pulling state would otherwise reuse seqs 1, 2, ...
        that peers' causal contexts already cover, and its new entries would stay invisible.
        Starting at 1000 × the wall clock in ms puts them above anything it wrote before, unless
        it wrote over a thousand entries per millisecond of its previous life; the old dots then
        fall out of the window, as they should (this peer no longer vouches for them).
        """
        if orset.context.max_seq(self.peer_id) == 0:
            return {"min_seq": self.state.wall_ms() * 1000}
        return {}

    def _write(self, mutate: Callable[[RunDoc], RunDoc]) -> RunDoc:
        delta = self.state.write_own(self.peer_id, mutate)
        if self.on_delta is not None and not delta.is_empty():
            self.on_delta(delta)
        return delta
