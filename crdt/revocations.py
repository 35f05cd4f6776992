"""`RevocationSet`: an invite run's revocations, a grow-only set every replica keeps whole.

A revocation used to travel as its issuer's ban vote, in a window of the issuer's last 16 that
lived in memory: a replica that joined or restarted after 16 more admitted the revoked peer on
its unexpired certificate, and replicas disagreed on who was certified. Here each revocation is
its own signed envelope (crdt/certificates.py) that any replica checks alone, whenever and from
whomever it arrives: the creator's stands by its signature; an admin's carries the admin's
certificate, which must be the creator's, of role `admin`, and unexpired when the revocation was
signed. Replicas keep them all (the set only grows), exchange them by anti-entropy (crdt/sync.py:
a digest, then what differs), and the node persists them (node/runs/revocation_file.py).

Who is revoked is a function of the set alone, so replicas holding the same set agree: `peer` is
revoked when the creator revoked it, or an admin did whom the creator has not revoked (revoking
a rogue admin voids its revocations; the creator re-revokes any that should stand). Pairs
learned from ban votes without an envelope (older peers, `note`) count the same way, in memory.

Bounded: at most `max_per_issuer` revocations per issuer (the creator names its admins, so the
whole set is bounded by its choices); one more is refused with `StateFull`, never by dropping
an old one. A revocation stamped more than `max_drift_ms` in our future is refused for now
(`ClockDrift`), blaming nobody.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable

from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.packing import pack, unpack

from .certificates import MAX_REVOCATION_BYTES, open_certificate, open_revocation
from .errors import ClockDrift, NotAdmitted, StateFull
from .hlc import wall_clock_ms
from .wire import read_bytes, read_list

MAX_REVOCATIONS_PER_ISSUER = 1024
MAX_FILE_REVOCATIONS = 64 * MAX_REVOCATIONS_PER_ISSUER  # what a saved set may hold at most


class RevocationSet:
    """The signed revocations of one run, keyed (issuer, revoked peer)."""

    def __init__(
        self,
        run_id: str,
        creator: str,
        *,
        max_per_issuer: int = MAX_REVOCATIONS_PER_ISSUER,
        max_drift_ms: int = 60_000,
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.run_id, self.creator = run_id, creator
        self.max_per_issuer, self.max_drift_ms, self.wall_ms = max_per_issuer, max_drift_ms, wall_ms
        self._entries: dict[tuple[str, str], tuple[int, bytes]] = {}  # → (issued_ms, envelope)
        self._noted: set[tuple[str, str]] = set()  # from ban votes: no envelope to forward
        self._per_issuer: Counter[str] = Counter()
        self._digest: bytes | None = None
        self._revoked: set[str] | None = None  # revoked_peers(), until the set changes
        self.listeners: list[Callable[[], None]] = []  # called after new envelopes were kept

    # -- adding

    def check(self, raw: bytes) -> tuple[str, str, int]:
        """(issuer, peer, issued_ms) of a valid revocation; `ProtocolError` (`NotAdmitted` when
        its signer may not revoke: the signer is to blame), `ClockDrift` if from our future."""
        revocation = open_revocation(raw, self.run_id)
        issuer, peer = revocation.issuer, revocation.peer
        if peer == self.creator:
            raise NotAdmitted("nobody revokes a run's creator")
        if issuer != self.creator:
            if not revocation.issuer_certificate:
                raise NotAdmitted(f"{issuer} may not revoke members of this run")
            held = open_certificate(revocation.issuer_certificate, self.run_id)
            if held.peer != issuer or held.issuer != self.creator or held.role != "admin":
                raise NotAdmitted(f"{issuer} holds no admin certificate from the run's creator")
            if held.expires_ms < revocation.issued_ms:
                raise NotAdmitted(f"{issuer}'s admin certificate had expired when it revoked")
        if revocation.issued_ms > self.wall_ms() + self.max_drift_ms:
            raise ClockDrift(f"a revocation by {issuer} is stamped in our future")
        return issuer, peer, revocation.issued_ms

    def add(self, raw: bytes) -> bool:
        """Verify and keep `raw`; False if we held it (or an earlier one of the same pair)."""
        if self._keep(raw):
            self._changed()
            return True
        return False

    def _keep(self, raw: bytes) -> bool:
        issuer, peer, issued_ms = self.check(raw)
        key = (issuer, peer)
        known = self._entries.get(key)
        if known is not None and known <= (issued_ms, raw):
            return False  # per pair, the earliest envelope is kept: one choice on every replica
        if known is None and self._per_issuer[issuer] >= self.max_per_issuer:
            raise StateFull(f"{issuer} has revoked {self.max_per_issuer} peers of this run already")
        if known is None:
            self._per_issuer[issuer] += 1
        self._entries[key] = (issued_ms, raw)
        self._digest = self._revoked = None
        return True

    def absorb(self, envelopes: Iterable[bytes]) -> tuple[int, list[tuple[str | None, str]]]:
        """Add many (an anti-entropy answer, a saved file): how many were new, and who is to
        blame for what was refused (`None`: the bytes opened as no revocation of this run)."""
        added, blamed = 0, []
        for raw in envelopes:
            try:
                added += self._keep(raw)
            except (ClockDrift, StateFull):
                continue  # a clock, or no room: nobody to blame
            except NotAdmitted as exc:
                blamed.append((_signer(raw, self.run_id), f"revocation: {exc}"))
            except ProtocolError as exc:
                blamed.append((None, f"bad revocation: {exc}"))
        if added:
            self._changed()
        return added, blamed

    def note(self, issuer: str, peer: str) -> None:
        """A revocation known without its envelope (an issuer's ban vote, checked by the caller)."""
        if peer != self.creator and (issuer, peer) not in self._noted:
            self._noted.add((issuer, peer))
            self._revoked = None

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()

    # -- what replicas ask

    def revoked(self, peer: str) -> bool:
        return peer in self.revoked_peers()

    def revoked_peers(self) -> set[str]:
        """Every peer the set revokes (a function of the set alone). Read it; never mutate it."""
        if self._revoked is None:
            pairs = self._entries.keys() | self._noted
            by_creator = {peer for issuer, peer in pairs if issuer == self.creator}
            self._revoked = by_creator | {
                p for i, p in pairs if i != self.creator and i not in by_creator
            }
        return self._revoked

    def envelopes(self) -> list[bytes]:
        return [raw for _, raw in sorted(self._entries.values())]

    def __len__(self) -> int:
        return len(self._entries)

    def digest(self) -> bytes:
        """A hash of the envelopes held (empty for none): equal sets, equal digests."""
        if self._digest is None:
            raws = sorted(raw for _, raw in self._entries.values())
            self._digest = hashlib.blake2b(b"".join(raws), digest_size=16).digest() if raws else b""
        return self._digest

    # -- persistence (the node writes the bytes atomically)

    def encode(self) -> bytes:
        return pack(self.envelopes())

    def load(self, blob: bytes) -> int:
        """Add the envelopes of `encode()`d bytes; how many were new. `DecodeError` if torn."""
        items = read_list(
            unpack(blob, max_size=MAX_FILE_REVOCATIONS * MAX_REVOCATION_BYTES, what="revocations"),
            "revocations",
            max_len=MAX_FILE_REVOCATIONS,
        )
        raws = [read_bytes(x, "revocation", max_len=MAX_REVOCATION_BYTES) for x in items]
        return self.absorb(raws)[0]


def _signer(raw: bytes, run_id: str) -> str | None:
    try:
        return open_revocation(raw, run_id).issuer
    except ProtocolError:
        return None


__all__ = ["MAX_REVOCATIONS_PER_ISSUER", "RevocationSet"]
