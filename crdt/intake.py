"""`Intake`: what the network hands a replica — checked, deduplicated, applied, or penalised.

Every envelope, by gossip or in an anti-entropy message, passes the same gate: a duplicate
filter (an LRU of content hashes), `signed.open_delta` (signature, run, size, strict decode),
then `RunState.apply_remote` (ownership, clock drift, capacity). The gossip validator's work is
kept (bounded) so the delivery that follows it does not decode twice.

Blame the signer, never the messenger. An envelope whose signature holds but whose content
breaks a rule (writes another owner's slot, say) costs its signer a `Penalty`, whoever handed it
over. One that a clock can explain (`ClockDrift`: the signer's clock or ours is off) or that
finds no room (`StateFull`) costs nobody anything. Only bytes that do not even open as a signed
delta are the hander's fault: on gossip the hander is the message's publisher (gossipsub signs
messages), and an anti-entropy answer is penalised once for all its bad envelopes, never once
per envelope.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from peertrain.protocol.errors import ProtocolError

from .errors import ClockDrift, NotAdmitted, StateFull
from .hlc import HybridClock
from .proofs import ProofStore
from .runstate import RunState
from .signed import SignedDelta, open_delta

log = logging.getLogger(__name__)

PRECHECKED_CACHE = 256  # envelopes the gossip validator checked, awaiting their delivery

V = TypeVar("V")


@dataclass(frozen=True, slots=True, kw_only=True)
class Penalty:
    """Remote misbehaviour: `peer` handed us something invalid (`reason`)."""

    peer: str
    reason: str
    points: float = 20.0


@dataclass(slots=True)
class IntakeCounts:
    received: int = 0  # gossiped envelopes (anti-entropy ones are not counted here)
    duplicates: int = 0
    applied: int = 0
    rejected: int = 0
    non_members: int = 0  # invite runs: envelopes of non-members, dropped before anything else


class Intake:
    def __init__(
        self,
        *,
        state: RunState,
        own_id: str,
        clock: HybridClock,
        proofs: ProofStore,
        seen_cache: int,
        on_own: Callable[[SignedDelta], None],
        on_penalty: Callable[[Penalty], None] | None = None,
    ) -> None:
        self.state = state
        self.own_id = own_id
        self.clock = clock  # our writer's: it must stay ahead of every stamp we have seen
        self.proofs = proofs
        self.seen_cache = seen_cache
        self.on_own = on_own  # our own delta, from before a restart
        self.on_penalty = on_penalty
        self.counts = IntakeCounts()
        self.listeners: list[Callable[[str], None]] = []  # called with the owner after a change
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._last_applied = False
        self._prechecked: OrderedDict[bytes, SignedDelta] = OrderedDict()

    def precheck(self, data: bytes) -> bool | None:
        """Would `accept` take `data`? True, False (reject: its publisher is to blame) or None
        (drop, nobody to blame). No state change; the check is kept for the delivery."""
        key = _key(data)
        if key in self._seen or key in self._prechecked:
            return True
        try:
            signed = open_delta(data, run_id=self.state.run_id)
            self.state.check_remote(signed.signer, signed.doc)
        except ClockDrift:
            return None  # a clock is off: refuse it, blame nobody
        except NotAdmitted:
            self.counts.non_members += 1
            return False  # never forwarded; its publisher (gossipsub signs) is blamed
        except ProtocolError:
            return False
        except StateFull:
            return True  # valid, just no room here
        _remember(self._prechecked, key, signed, PRECHECKED_CACHE)
        return True

    def accept(self, sender: str, data: bytes) -> bool:
        """Apply one envelope `sender` handed us (gossip); False if a duplicate or refused."""
        blamed = self._take(data)
        if blamed is not None:
            peer, reason = blamed
            self.penalise(sender if peer is None else peer, reason)
        return blamed is None and self._last_applied

    def accept_answer(self, sender: str, envelopes: Iterable[bytes]) -> None:
        """Apply an anti-entropy answer's envelopes. Signers of bad content are penalised each;
        the peer that handed over envelopes that do not even open, once for the answer."""
        unopened = 0
        for data in envelopes:
            blamed = self._take(data)
            if blamed is None:
                continue
            peer, reason = blamed
            if peer is None:
                unopened += 1
            else:
                self.penalise(peer, reason)
        if unopened:
            self.penalise(sender, f"{unopened} envelope(s) that are no signed delta of this run")

    def _take(self, data: bytes) -> tuple[str | None, str] | None:
        """Check and apply `data`. None when nobody is to blame (applied, duplicate, no room,
        a clock); else (signer, reason), signer None when the bytes did not open."""
        self._last_applied = False
        key = _key(data)
        if key in self._seen:
            self.counts.duplicates += 1
            return None
        _remember(self._seen, key, None, self.seen_cache)
        try:
            signed = self._prechecked.pop(key, None) or open_delta(data, run_id=self.state.run_id)
        except ProtocolError as exc:
            self.counts.rejected += 1
            return None, f"bad state delta: {exc}"
        try:
            self._apply(signed)
        except ClockDrift as exc:
            self._seen.pop(key, None)  # a later copy may be in time
            self.counts.rejected += 1
            log.info("refused a delta of %s without blame: %s", signed.signer, exc)
            return None
        except NotAdmitted as exc:
            self._seen.pop(key, None)  # its certificate's issuer may still be on its way
            self.counts.non_members += 1
            return signed.signer, f"not admitted: {exc}"
        except ProtocolError as exc:
            self.counts.rejected += 1
            return signed.signer, f"signed a bad state delta: {exc}"
        except StateFull as exc:
            self._seen.pop(key, None)  # no room now; a later copy may find some
            log.info("dropped a delta of %s: %s", signed.signer, exc)
            return None
        self.counts.applied += 1
        self._last_applied = True
        return None

    def accept_revocations(self, sender: str, envelopes: Iterable[bytes]) -> None:
        """Keep an anti-entropy message's revocations. A valid envelope signed by one who may
        not revoke costs its signer; bytes that are no revocation, the sender, once."""
        blamed = self.state.add_revocations(list(envelopes))
        unopened = sum(1 for peer, _ in blamed if peer is None)
        for peer, reason in blamed:
            if peer is not None:
                self.counts.rejected += 1
                self.penalise(peer, reason)
        if unopened:
            self.counts.rejected += unopened
            self.penalise(sender, f"{unopened} revocation(s) that are none of this run")

    def accept_manifest(self, peer: str, raw: bytes | None) -> None:
        if raw is not None and self.state.manifest is None:
            try:
                self.state.accept_manifest(raw)
            except ProtocolError as exc:
                self.penalise(peer, f"bad manifest: {exc}")

    def penalise(self, peer: str, reason: str) -> None:
        log.warning("penalising %s: %s", peer, reason)
        if self.on_penalty is not None:
            self.on_penalty(Penalty(peer=peer, reason=reason))

    def _apply(self, signed: SignedDelta) -> None:
        self.state.apply_remote(signed.signer, signed.doc)
        for _, stamp, _ in signed.doc.members.registers():
            self.clock.observe(stamp)
        if signed.signer == self.own_id:
            self.on_own(signed)
        else:
            self.proofs.add(signed)
        for listener in self.listeners:
            listener(signed.signer)


def _key(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _remember(cache: OrderedDict[bytes, V], key: bytes, value: V, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
