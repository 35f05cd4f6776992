"""`Replicator`: keeps one `RunState` in step with the run's other members.

Two paths, both carrying only envelopes signed by the owner of the slots they write:

1. **Gossip.** Local writes (`replicator.writer`) are joined into one pending delta group and
   published on the run's topic at most once per `publish_interval`: py-libp2p's gossipsub drops
   bursts beyond ~10 messages/s per peer and topic, and anything over 1 MiB, without a word.
   Batching keeps messages few and small (a group is never bigger than the owner's whole slot,
   which `records.py` caps), whatever the write rate. When writes pause, we publish a snapshot
   of our whole slot `idle_repeats` times (after 0.25 s, then 0.5 s more): it subsumes every
   delta before it, so a peer that lost some delivery is repaired in a fraction of a second.
2. **Anti-entropy.** Every `sync_interval` (jittered) we run a push-pull exchange (`sync.py`)
   with a random reachable peer, which repairs whatever gossip lost; a joiner's first exchange
   (`bootstrap`) brings it the whole state.

Everything received passes `intake.py` (signature, run, size, strict decode, ownership, clock
drift, capacity). A failure costs the peer that handed it to us a `Penalty` and changes nothing
else. Memory stays bounded under a flood: the state and the proof store are capped per owner,
the duplicate filter is an LRU, and the transport's inbound channel is bounded.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.errors import PeertrainError
from peertrain.protocol.messages import ErrorCode, ErrorResponse

from .intake import Intake, Penalty
from .proofs import ProofStore, ProofStoreStatistics
from .rundoc import RunDoc
from .runstate import RunState, RunStateStatistics
from .signed import SignedDelta, seal_delta
from .sync import MAX_SYNC_REVOCATIONS, SyncReply, SyncRequest
from .transport import Exchange, Inbound, PubSub
from .writer import RunWriter

if TYPE_CHECKING:
    # libp2p installs trio-typing, whose stubs shadow trio's own types and do not export
    # trio.TaskStatus; this is the same protocol.
    from trio_typing import TaskStatus

__all__ = ["Penalty", "Replicator", "ReplicatorConfig", "ReplicatorStatistics", "topic_for"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicatorConfig:
    publish_interval: float = 0.125  # <= 8 messages/s: under gossipsub's silent 10/s cut
    idle_repeats: int = 2  # after a burst of writes, publish our whole slot this many times
    idle_repeat_after: float = 0.25  # first repeat after this much quiet, then doubling
    sync_interval: float = 2.0
    sync_jitter: float = 0.5  # each wait is sync_interval * (1 ± jitter)
    sync_timeout: float = 10.0
    max_sync_reply_bytes: int = 512 * 1024
    max_proof_deltas: int = 8
    seen_cache: int = 8192
    collect_interval: float = 5.0


@dataclass(slots=True)
class _Counts:
    published: int = 0
    published_bytes: int = 0
    syncs: int = 0
    sync_failures: int = 0
    envelopes_sent: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicatorStatistics:
    published: int
    published_bytes: int
    received: int
    duplicates: int
    applied: int
    rejected: int
    non_members: int
    syncs: int
    sync_failures: int
    envelopes_sent: int
    proofs: ProofStoreStatistics
    state: RunStateStatistics


def topic_for(run_id: str) -> str:
    return f"/peertrain/{run_id}/crdt"


class Replicator:
    """Replicates `state` over `pubsub` + `exchange`. `await nursery.start(rep.run)`."""

    def __init__(
        self,
        *,
        state: RunState,
        key_pair: KeyPair,
        pubsub: PubSub,
        exchange: Exchange,
        config: ReplicatorConfig = ReplicatorConfig(),
        on_penalty: Callable[[Penalty], None] | None = None,
        seed: int | None = None,
    ) -> None:
        self.state = state
        self.key_pair = key_pair
        self.peer_id = ID.from_pubkey(key_pair.public_key).to_base58()
        self.pubsub, self.exchange, self.config = pubsub, exchange, config
        self.topic = topic_for(state.run_id)
        self.writer = RunWriter(state, self.peer_id, on_delta=self._queue, key_pair=key_pair)
        self.proofs = ProofStore(max_deltas=config.max_proof_deltas)
        self.intake = Intake(
            state=state,
            own_id=self.peer_id,
            clock=self.writer.clock,
            proofs=self.proofs,
            seen_cache=config.seen_cache,
            on_own=self._own_from_before,
            on_penalty=on_penalty,
        )
        self.listeners = self.intake.listeners  # called with the owner after a change
        self._rng = random.Random(seed)
        self._pending: RunDoc | None = None
        self._wake = trio.Event()
        self._seq = 0
        self._own_snapshot: SignedDelta | None = None
        self._counts = _Counts()

    # -- service

    async def run(self, *, task_status: TaskStatus[Replicator] = trio.TASK_STATUS_IGNORED) -> None:
        inbox = await self.pubsub.subscribe(self.topic, self.validate_gossip)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._receive_loop, inbox)
            nursery.start_soon(self._publish_loop)
            nursery.start_soon(self._sync_loop)
            nursery.start_soon(self._collect_loop)
            task_status.started(self)

    async def _receive_loop(self, inbox: trio.abc.ReceiveChannel[Inbound]) -> None:
        async with inbox:
            async for msg in inbox:
                self.handle_gossip(_peer_name(msg.sender), msg.data)

    async def _publish_loop(self) -> None:
        """Publish pending deltas, paced; once idle, repeat our whole slot a few times."""
        cfg = self.config
        repeats_left, repeat_at = 0, float("inf")
        while True:
            with trio.move_on_at(repeat_at):
                await self._wake.wait()
            self._wake = trio.Event()
            delta, self._pending = self._pending, None
            if delta is not None:
                await self._publish(self._seal(delta, snapshot=False))
                repeats_left, delay = cfg.idle_repeats, cfg.idle_repeat_after
            elif repeats_left and trio.current_time() >= repeat_at:
                # Gossip lost a delivery now and then; our snapshot subsumes every delta we sent,
                # so one of these repairs any loss without waiting for anti-entropy.
                snapshot = self.own_snapshot()
                if snapshot is not None:
                    await self._publish(snapshot)
                repeats_left, delay = repeats_left - 1, delay * 2
            else:
                continue
            repeat_at = trio.current_time() + delay if repeats_left else float("inf")
            await trio.sleep(cfg.publish_interval)

    async def _publish(self, signed: SignedDelta) -> None:
        try:
            await self.pubsub.publish(self.topic, signed.raw)
        except PeertrainError as exc:  # anti-entropy will carry it instead
            log.warning("could not publish a delta: %s", exc)
        else:
            self._counts.published += 1
            self._counts.published_bytes += len(signed.raw)

    async def _sync_loop(self) -> None:
        cfg = self.config
        while True:
            await trio.sleep(cfg.sync_interval * (1 + cfg.sync_jitter * self._rng.uniform(-1, 1)))
            partners = self._partners()
            if partners:
                await self.sync_with(self._rng.choice(partners))

    async def _collect_loop(self) -> None:
        while True:
            await trio.sleep(self.config.collect_interval)
            for owner in self.state.collect():
                self.proofs.drop(owner)

    def _partners(self) -> list[str]:
        return [p for p in self.exchange.peers() if p != self.peer_id]

    # -- local writes

    def _queue(self, delta: RunDoc) -> None:
        if self._pending is None:
            self._pending = delta.copy()
        else:
            self._pending.merge(delta)
        self._own_snapshot = None
        self._wake.set()

    def _seal(self, doc: RunDoc, *, snapshot: bool) -> SignedDelta:
        self._seq = max(self._seq + 1, self.state.wall_ms())
        return seal_delta(
            self.key_pair,
            self.peer_id,
            run_id=self.state.run_id,
            seq=self._seq,
            doc=doc,
            snapshot=snapshot,
        )

    def own_snapshot(self) -> SignedDelta | None:
        """Our whole slot, signed (cached until our next write)."""
        if self._own_snapshot is None:
            doc = self.state.doc.project(self.peer_id)
            if not doc.is_empty():
                self._own_snapshot = self._seal(doc, snapshot=True)
        return self._own_snapshot

    # -- inbound envelopes

    def validate_gossip(self, sender: str, data: bytes) -> bool | None:
        """Gossipsub topic validator: would `handle_gossip` accept `data`? (No state change.)
        None: refuse it without blame (a clock is off)."""
        return self.intake.precheck(data)

    def handle_gossip(self, sender: str, data: bytes) -> bool:
        """Apply one gossiped envelope; False if it was a duplicate or rejected."""
        self.intake.counts.received += 1
        return self.intake.accept(sender, data)

    def _own_from_before(self, signed: SignedDelta) -> None:
        """Our own delta, from before a restart: continue our sequence after it."""
        self._seq = max(self._seq, signed.seq)
        self._own_snapshot = None

    # -- anti-entropy

    def _request(
        self,
        envelopes: Sequence[bytes] = (),
        manifest: bytes | None = None,
        revocations: Sequence[bytes] = (),
    ) -> SyncRequest:
        return SyncRequest(
            run=self.state.run_id,
            has_manifest=self.state.manifest is not None,
            summary=self.state.summary(),
            envelopes=tuple(envelopes),
            manifest=manifest,
            revocations_digest=self._revocations()[0],
            revocations=tuple(revocations),
        )

    def _revocations(self, their_digest: bytes | None = None) -> tuple[bytes, list[bytes]]:
        """Our revocation set's digest, and its envelopes when `their_digest` differs."""
        revocations = self.state.revocations
        if revocations is None:
            return b"", []
        mine = revocations.digest()
        if their_digest is None or their_digest == mine:
            return mine, []
        envelopes = revocations.envelopes()
        self._rng.shuffle(envelopes)  # more than a message holds: a different part each time
        return mine, envelopes[:MAX_SYNC_REVOCATIONS]

    async def sync_with(self, peer: str) -> SyncReply | None:
        """One push-pull exchange with `peer`; its (first) reply, or None if it failed."""
        self._counts.syncs += 1
        reply = await self._ask(peer, self._request())
        if reply is None:
            return None
        self._absorb(peer, reply)
        mine = self.state.summary()
        stale = [o for o, h in reply.differing.items() if mine.get(o, h) != h]
        push = self._envelopes_for(stale)[0]
        manifest = None if reply.has_manifest else self.state.manifest_envelope
        revocations = self._revocations(reply.revocations_digest)[1]
        if push or manifest is not None or revocations:
            second = await self._ask(peer, self._request(push, manifest, revocations))
            if second is not None:
                self._absorb(peer, second)
        return reply

    async def bootstrap(self, peers: Iterable[str] | None = None, *, attempts: int = 3) -> bool:
        """Pull the whole state from reachable peers (a joiner, or a restarted node)."""
        candidates = list(peers if peers is not None else self._partners())
        self._rng.shuffle(candidates)
        for peer in candidates[:attempts]:
            for _ in range(64):  # a budget-limited reply says `more`: ask again
                reply = await self.sync_with(peer)
                if reply is None or not reply.more:
                    break
            if reply is not None:
                return True
        return False

    async def _ask(self, peer: str, request: SyncRequest) -> SyncReply | None:
        try:
            with trio.fail_after(self.config.sync_timeout):
                return await self.exchange.request(peer, request)
        except (PeertrainError, trio.TooSlowError) as exc:
            self._counts.sync_failures += 1
            log.debug("anti-entropy with %s failed: %r", peer, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a transport's own errors (a stream that failed
            # to open, a reset) are the network's doing: they must not stop replication.
            self._counts.sync_failures += 1
            log.info("anti-entropy with %s failed in the transport: %r", peer, exc)
            return None

    def _absorb(self, peer: str, reply: SyncReply) -> None:
        self.intake.accept_manifest(peer, reply.manifest)
        self.intake.accept_answer(peer, reply.envelopes)
        self.intake.accept_revocations(peer, reply.revocations)

    def handle_sync(self, peer: str, request: SyncRequest) -> SyncReply | ErrorResponse:
        """Serve one anti-entropy request (sync: no awaits, so it never interleaves)."""
        if request.run != self.state.run_id:
            return request.reply(ErrorResponse, code=ErrorCode.NOT_FOUND, reason="not in that run")
        self.intake.accept_manifest(peer, request.manifest)
        self.intake.accept_answer(peer, request.envelopes)
        self.intake.accept_revocations(peer, request.revocations)
        revocations_digest, revocations = self._revocations(request.revocations_digest)
        mine, theirs = self.state.summary(), request.summary
        differ = [o for o in mine.keys() | theirs.keys() if mine.get(o) != theirs.get(o)]
        self._rng.shuffle(differ)
        envelopes, more = self._envelopes_for(o for o in differ if o in mine)
        return request.reply(
            SyncReply,
            manifest=None if request.has_manifest else self.state.manifest_envelope,
            has_manifest=self.state.manifest is not None,
            envelopes=tuple(envelopes),
            differing={o: mine.get(o, b"") for o in differ if o in theirs},
            more=more,
            revocations_digest=revocations_digest,
            revocations=tuple(revocations),
        )

    def _envelopes_for(self, owners: Iterable[str]) -> tuple[list[bytes], bool]:
        """Signed envelopes proving `owners`' slots, within the reply budget (and if cut short)."""
        out: list[bytes] = []
        budget = self.config.max_sync_reply_bytes
        for owner in owners:
            if owner == self.peer_id:
                snapshot = self.own_snapshot()
                envelopes = [snapshot.raw] if snapshot is not None else []
            else:
                envelopes = self.proofs.envelopes(owner)
            size = sum(len(e) for e in envelopes)
            if size > budget:
                return out, True
            out.extend(envelopes)
            budget -= size
        self._counts.envelopes_sent += len(out)
        return out, False

    def statistics(self) -> ReplicatorStatistics:
        counts, taken = self._counts, self.intake.counts
        return ReplicatorStatistics(
            published=counts.published,
            published_bytes=counts.published_bytes,
            received=taken.received,
            duplicates=taken.duplicates,
            applied=taken.applied,
            rejected=taken.rejected,
            non_members=taken.non_members,
            syncs=counts.syncs,
            sync_failures=counts.sync_failures,
            envelopes_sent=counts.envelopes_sent,
            proofs=self.proofs.statistics(),
            state=self.state.statistics(),
        )


def _peer_name(sender: object) -> str:
    """Transports may hand over a base58 string or a libp2p `ID`; penalties take the string."""
    return sender if isinstance(sender, str) else sender.to_base58()  # type: ignore[attr-defined]
