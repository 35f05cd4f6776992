"""`Intake`: what the network hands a replica — checked, deduplicated, applied, or penalised.

Every envelope, by gossip or in an anti-entropy message, passes the same gate: a duplicate
filter (an LRU of content hashes), `signed.open_delta` (signature, run, size, strict decode),
then `RunState.apply_remote` (ownership, clock drift, capacity). A `ProtocolError` costs the peer
that handed it to us a `Penalty`; a full table (`StateFull`) costs nobody anything. The gossip
validator's work is kept (bounded) so the delivery that follows it does not decode twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from peertrain.protocol.errors import ProtocolError

from .errors import StateFull
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
        self._prechecked: OrderedDict[bytes, SignedDelta] = OrderedDict()

    def precheck(self, data: bytes) -> bool:
        """Would `accept` take `data`? (No state change; the check is kept for the delivery.)"""
        key = _key(data)
        if key in self._seen or key in self._prechecked:
            return True
        try:
            signed = open_delta(data, run_id=self.state.run_id)
            self.state.check_remote(signed.signer, signed.doc)
        except ProtocolError:
            return False  # the transport penalises the forwarder
        except StateFull:
            return True  # valid, just no room here
        _remember(self._prechecked, key, signed, PRECHECKED_CACHE)
        return True

    def accept(self, sender: str, data: bytes) -> bool:
        """Apply one envelope `sender` handed us; False if it was a duplicate or refused."""
        key = _key(data)
        if key in self._seen:
            self.counts.duplicates += 1
            return False
        _remember(self._seen, key, None, self.seen_cache)
        try:
            signed = self._prechecked.pop(key, None) or open_delta(data, run_id=self.state.run_id)
            self._apply(signed)
        except ProtocolError as exc:
            self.counts.rejected += 1
            self.penalise(sender, f"bad state delta: {exc}")
            return False
        except StateFull as exc:
            self._seen.pop(key, None)  # no room now; a later copy may find some
            log.info("dropped a delta from %s: %s", sender, exc)
            return False
        self.counts.applied += 1
        return True

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
