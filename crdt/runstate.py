"""`RunState`: the run's replicated document plus the rules that make it safe to share.

The document (`RunDoc`) is a CRDT; this class adds what a lattice cannot express:

- **Ownership.** A remote delta is applied only if every slot it writes belongs to its signer
  (`apply_remote`, the rules in write_rules.py), else `ForbiddenWrite`: nobody can touch
  another peer's membership, progress, checkpoint announcements or ban votes, nobody can
  remove another peer, and only the run's anchors keep score cards.
- **Leases instead of removal.** A member record carries a lease; the member renews it. A lease
  counts for at most `max_lease_ms` past the write's stamp (a peer cannot make itself immortal),
  an expired member drops out of every view and of the digest, and `collect()` forgets it
  entirely `expiry_grace_ms` later (its progress, checkpoints and votes with it).
- **Bounded size.** Every owner's slot is capped (records.py, windows in rundoc.py), at most
  `max_owners` owners are held (`StateFull` beyond), and stamps more than `max_drift_ms` in the
  future are refused (`ClockDrift`).
- **Admission.** With an `Admission` (crdt/admission.py) installed, a delta signed by a
  non-member of an invite run is refused (`NotAdmitted`) before it touches anything, and in an
  open run a full owner table makes room by evicting the oldest owner nobody vouched for
  (`vouch`): fresh IDs cannot lock an honest newcomer out, nor push out the run's anchors or the
  members the training layer counted.
- **Digests.** `summary()` maps each live member to a hash of its slot; `digest()` hashes the
  summary. Equal digests mean equal live state; anti-entropy compares summaries to find which
  owners' slots differ.

Every delta applied here is one owner's (remote deltas are checked, local ones come from our own
`RunWriter`), so the per-owner hash cache is invalidated precisely.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.packing import pack

from .admission import Admission, revocation_evidence
from .errors import NotAdmitted, StateFull
from .hlc import Stamp, wall_clock_ms
from .manifest import RunManifest, open_manifest
from .records import BanVote, CheckpointRef, MemberInfo
from .revocations import RevocationSet
from .rundoc import RunDoc
from .write_rules import check_delta

OWNER_HASH_LEN = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class StateLimits:
    max_owners: int = 1024
    max_lease_ms: int = 10 * 60_000
    expiry_grace_ms: int = 30_000
    max_drift_ms: int = 60_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    peer: str
    info: MemberInfo
    stamp: Stamp
    expires_ms: int  # the lease as it counts: capped at stamp + max_lease_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStateStatistics:
    owners: int
    live_members: int
    checkpoint_entries: int
    ban_entries: int
    dot_cloud: int
    collected: int


class RunState:
    """One replica of a run's state. Sync API: call it from the event loop, it never blocks."""

    def __init__(
        self,
        run_id: str,
        *,
        limits: StateLimits = StateLimits(),
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.run_id = run_id
        self.limits = limits
        self.wall_ms = wall_ms
        self.manifest: RunManifest | None = None
        self.manifest_envelope: bytes | None = None
        self._doc = RunDoc()
        self._owners: set[str] = set()
        self._hashes: dict[str, bytes] = {}
        self._first_seen: dict[str, int] = {}
        self._collected = 0
        self.admission: Admission | None = None
        self._vouched: set[str] = set()
        self._evicted: list[str] = []
        self._revocations: RevocationSet | None = None  # from the manifest on: its creator's

    @property
    def doc(self) -> RunDoc:
        """The joined document. Read it; never mutate it (use `apply_*` and `RunWriter`)."""
        return self._doc

    # -- the manifest

    def accept_manifest(self, raw_envelope: bytes) -> bool:
        """Verify and keep the manifest; False if we already hold it. Raises `ProtocolError`."""
        if self.manifest is not None:
            return False
        self.manifest = open_manifest(raw_envelope, self.run_id)
        self.manifest_envelope = raw_envelope
        self._revocations = RevocationSet(
            self.run_id,
            self.manifest.creator,
            max_drift_ms=self.limits.max_drift_ms,
            wall_ms=self.wall_ms,
        )
        return True

    # -- revocations (invite runs): a grow-only set every replica keeps whole

    @property
    def revocations(self) -> RevocationSet | None:
        """The run's revocations: the admission's once installed, else ours (None before the
        manifest names the creator)."""
        if self.admission is not None:
            return self.admission.revocations
        return self._revocations

    def add_revocations(
        self, envelopes: list[bytes], *, strict: bool = False
    ) -> list[tuple[str | None, str]]:
        """Keep the valid revocations among `envelopes` and forget the peers they revoke; who
        is to blame for the rest (None: bytes that are no revocation of this run). `strict`:
        raise the first refusal instead (our own)."""
        revocations = self.revocations
        if revocations is None or not envelopes:
            return []
        blamed: list[tuple[str | None, str]] = []
        if strict:
            added = sum(revocations.add(raw) for raw in envelopes)
        else:
            added, blamed = revocations.absorb(envelopes)
        if added:
            self._forget_revoked()
        return blamed

    def _forget_revoked(self) -> None:
        revocations = self.revocations
        if revocations is None or (self.admission is not None and not self.admission.invite):
            return
        for peer in self._owners & revocations.revoked_peers():
            self._forget(peer)
            self._evicted.append(peer)

    # -- writes

    def check_remote(self, signer: str, delta: RunDoc) -> None:
        """Raise unless `signer` may apply `delta` (write_rules.py, then capacity)."""
        horizon = self.wall_ms() + self.limits.max_drift_ms
        check_delta(signer, delta, horizon_ms=horizon, admission=self.admission)
        if signer not in self._owners and len(self._owners) >= self.limits.max_owners:
            self.collect()
            if len(self._owners) >= self.limits.max_owners and self._evictable() is None:
                raise StateFull(f"run state holds {len(self._owners)} owners already")

    def apply_remote(self, signer: str, delta: RunDoc) -> None:
        """Join a verified signer's delta, after checking it writes only the signer's slots."""
        self.check_remote(signer, delta)
        if signer not in self._owners and len(self._owners) >= self.limits.max_owners:
            victim = self._evictable()
            assert victim is not None  # check_remote raised StateFull otherwise
            self._forget(victim)
            self._evicted.append(victim)
        self._joined(signer, delta)
        self._apply_revocations(delta)

    def install_admission(self, admission: Admission) -> list[str]:
        """Guard this replica with `admission` from now on. In an invite run, owners stored
        before (without a valid certificate in their record) are forgotten; returns them."""
        if self._revocations is not None:  # ours were replicated (and loaded) before: keep them
            self._revocations.absorb(admission.revocations.envelopes())
            admission.revocations = self._revocations
        self.admission = admission
        if not admission.invite:
            return []
        for owner in sorted(self._owners):
            record = self._doc.members.get(owner)
            if record is not None and record.certificate and not admission.admits(owner):
                try:
                    admission.add_certificate(record.certificate)
                except ProtocolError:
                    pass  # no valid certificate: forgotten below
        self._apply_revocations(self._doc)
        self._forget_revoked()
        strangers = [o for o in self._owners if not admission.admits(o)]
        for owner in strangers:
            self._forget(owner)
        self._evicted.extend(strangers)
        return strangers

    def _apply_revocations(self, delta: RunDoc) -> None:
        """Invite runs: a ban vote whose evidence is `revocation_evidence` and whose voter may
        issue certificates revokes its peer; the revoked member's slots are forgotten."""
        admission = self.admission
        if admission is None or not admission.invite:
            return
        for voter, _, vote in delta.bans.entries():
            if vote.evidence != revocation_evidence(self.run_id, vote.peer):
                continue
            try:
                admission.revoke_by(voter, vote.peer)
            except NotAdmitted:
                continue  # the voter may not revoke (yet: its certificate may come later)
            if vote.peer in self._owners:
                self._forget(vote.peer)
                self._evicted.append(vote.peer)

    # -- eviction (open runs): who may be pushed out when the table is full

    def vouch(self, peer: str) -> None:
        """`peer` is established (counted in a round, or an anchor): never evict it."""
        if len(self._vouched) < self.limits.max_owners // 2:
            self._vouched.add(peer)

    def _evictable(self) -> str | None:
        """The oldest owner nobody vouched for, in open runs; None if there is none, in invite
        runs (only certified members are owners there) and without an admission policy."""
        if self.admission is None or self.admission.invite:
            return None  # no policy installed: a full table refuses newcomers (StateFull)
        protected = self._vouched | self.admission.anchors
        candidates = [o for o in self._owners if o not in protected]
        return min(candidates, key=lambda o: (self._first_seen[o], o), default=None)

    def write_own(self, owner: str, mutate: Callable[[RunDoc], RunDoc]) -> RunDoc:
        """Run a delta mutator on the document for `owner`'s own slots; return its delta."""
        delta = mutate(self._doc)
        self._vouched.add(owner)  # we never evict ourselves
        self._note(owner)
        self._apply_revocations(delta)
        return delta

    def _joined(self, owner: str, delta: RunDoc) -> None:
        if not delta.is_empty():
            self._doc.merge(delta)
            self._note(owner)

    def _note(self, owner: str) -> None:
        self._hashes.pop(owner, None)
        if owner not in self._owners:
            self._owners.add(owner)
            self._first_seen[owner] = self.wall_ms()

    # -- leases and garbage collection

    def member(self, peer: str) -> Member | None:
        """`peer`'s member record, expired or not."""
        info = self._doc.members.get(peer)
        if info is None:
            return None
        stamp = self._doc.members.stamp(peer)
        assert stamp is not None
        expires = min(info.lease_expiry_ms, stamp.wall_ms + self.limits.max_lease_ms)
        return Member(peer=peer, info=info, stamp=stamp, expires_ms=expires)

    def is_live(self, peer: str, now_ms: int | None = None) -> bool:
        m = self.member(peer)
        now_ms = self.wall_ms() if now_ms is None else now_ms
        return m is not None and m.expires_ms >= now_ms

    def collect(self) -> list[str]:
        """Forget owners expired (or never announced) for longer than the grace period; return
        them and the owners evicted since the last call."""
        cutoff = self.wall_ms() - self.limits.expiry_grace_ms
        gone = []
        for owner in self._owners:
            m = self.member(owner)
            since = m.expires_ms if m is not None else self._first_seen.get(owner, cutoff)
            if since < cutoff:
                gone.append(owner)
        for owner in gone:
            self._forget(owner)
        self._collected += len(gone)
        gone.extend(self._evicted)  # evicted since the last call: their proofs go too
        self._evicted.clear()
        return gone

    def _forget(self, owner: str) -> None:
        self._doc.drop(owner)
        self._owners.discard(owner)
        self._hashes.pop(owner, None)
        self._first_seen.pop(owner, None)
        self._vouched.discard(owner)

    # -- views

    def members(self) -> dict[str, Member]:
        """Live members by peer ID."""
        now = self.wall_ms()
        live = {}
        for peer in self._owners:
            m = self.member(peer)
            if m is not None and m.expires_ms >= now:
                live[peer] = m
        return live

    def progress(self, peer: str) -> int:
        return self._doc.progress.get(peer)

    def total_progress(self) -> int:
        return self._doc.progress.value

    def checkpoints(self) -> dict[int, dict[bytes, frozenset[str]]]:
        """round → content hash → providers (live members only)."""
        live = set(self.members())
        out: dict[int, dict[bytes, frozenset[str]]] = {}
        for replica, _, ref in self._doc.checkpoints.entries():  # one pass for every round
            if replica in live:
                by_hash = out.setdefault(ref.round, {})
                by_hash[ref.content_hash] = by_hash.get(ref.content_hash, frozenset()) | {replica}
        return out

    def latest_checkpoint(self) -> tuple[CheckpointRef, frozenset[str]] | None:
        rounds = self.checkpoints()
        if not rounds:
            return None
        r = max(rounds)
        content_hash, providers = max(rounds[r].items(), key=lambda kv: (len(kv[1]), kv[0]))
        return CheckpointRef(round=r, content_hash=content_hash), providers

    def ban_votes(self) -> dict[str, dict[str, bytes]]:
        """accused peer → {live voter: evidence hash}."""
        live = set(self.members())
        out: dict[str, dict[str, bytes]] = {}
        for voter, _, vote in self._doc.bans.entries():
            if voter in live and voter != vote.peer:
                out.setdefault(vote.peer, {})[voter] = vote.evidence
        return out

    def banned(self, *, quorum: float = 0.5) -> set[str]:
        """Peers that more than `quorum` of the live members voted to ban, with evidence."""
        live = len(self.members())
        return {p for p, voters in self.ban_votes().items() if len(voters) > quorum * live}

    # -- digests

    def owner_hash(self, owner: str) -> bytes:
        cached = self._hashes.get(owner)
        if cached is None:
            raw = self._doc.project(owner).encode()
            cached = self._hashes[owner] = hashlib.sha256(raw).digest()[:OWNER_HASH_LEN]
        return cached

    def summary(self) -> dict[str, bytes]:
        """Live member → hash of its slots: what anti-entropy compares."""
        return {peer: self.owner_hash(peer) for peer in self.members()}

    def digest(self) -> bytes:
        """A stable hash of the live state: equal on two replicas iff they agree."""
        rows = sorted(self.summary().items())
        return hashlib.sha256(pack([self.run_id, self.manifest is not None, rows])).digest()

    def owners(self) -> set[str]:
        return set(self._owners)

    def statistics(self) -> RunStateStatistics:
        doc = self._doc
        return RunStateStatistics(
            owners=len(self._owners),
            live_members=len(self.members()),
            checkpoint_entries=doc.checkpoints.entry_count(),
            ban_entries=doc.bans.entry_count(),
            dot_cloud=doc.checkpoints.context.cloud_size() + doc.bans.context.cloud_size(),
            collected=self._collected,
        )


__all__ = ["BanVote", "CheckpointRef", "Member", "MemberInfo", "RunState", "StateLimits"]
