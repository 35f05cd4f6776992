"""Update gossip for one DiLoCo group: announce small, pull big, close at all-in or deadline.

Outer updates are megabytes; pushing them through gossipsub's eager mesh would multiply traffic
by the mesh degree and hit its silent 1 MiB cut. So a member publishes a signed
`UpdateAnnouncement` (run, round, sender, size, checksum) on the group topic and serves the
payload, content-addressed by its checksum, over streams. Every other member pulls it from the
sender or from any peer that already has it (they announce `holds` too), so a payload crosses
each link about once; the checksum, signed by the sender, makes any holder as good as the
sender. A round closes when the updates of every live member are in, or at the deadline; late
announcements are dropped. Gossip loses messages, so a member repeats its own announcement and
round record until peers are past the round (`repeat_loop`), 2 s after sending, then at doubling
gaps up to 8 s: each repeat is forwarded by every member (ten members repeating every 2 s were
most of what overloaded gossipsub on two cores). The node injects the transport.

Bad input is refused before aggregation: an envelope that is not signed by its claimed sender,
targets another run or a round outside the window, or announces a payload of the wrong size is
rejected at the gossip validator (the forwarder is penalised by the node); a holder that serves
bytes not matching the checksum is caught chunk by chunk; updates of peers without a live lease
in RunState are dropped when the round closes.

Nothing is downloaded on a stranger's say. Announcements cost a few hundred bytes; payloads cost
megabytes, so a pull starts only for a sender that is a member at that moment (a joiner whose
lease arrives late is pulled as soon as it does: the round re-checks every second), only from
holders that are members themselves, at most `MAX_PULLS` at once. What a round records is
bounded too (gossip_round.py): `MAX_SENDERS` announced senders and `MAX_HOLDERS` holders per
payload, and a "holds" note only for a payload its sender announced. Two hundred fresh IDs
announcing 100 MB updates used to start two hundred downloads at once. In an invite run
(`admits`: the run's admission) an announcement or round record signed by a non-member is
rejected at the validator, before it is recorded or forwarded; its publisher is penalised and
`dropped` counts it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import trio
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import seal
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.messages import decode, encode
from peertrain.swarm.exchange.announcement import UpdateAnnouncement
from peertrain.swarm.exchange.gossip_round import GossipRound, Repeat
from peertrain.swarm.exchange.interface import Contribution
from peertrain.swarm.exchange.round_pace import RoundPace
from peertrain.swarm.exchange.round_record import (
    RoundRecord,
    RoundRecords,
    is_record,
    open_from_origin,
)
from peertrain.swarm.exchange.sharded.board import is_shard_message

log = logging.getLogger(__name__)

DOMAIN = "outer-update"
MAX_ENVELOPE = 2048
ROUND_WINDOW = 2  # accept announcements for rounds [current - 1, current + ROUND_WINDOW]
FETCH_TRIES = 10  # failed fetches from the same holders before waiting for a new holder
FETCH_PAUSE = 0.5  # seconds between those tries
MAX_PULLS = 4  # downloads in flight at once, per round
REPEAT_EVERY = 2.0  # seconds from sending our announcement or record to its first repeat
REPEAT_MAX = 8.0  # the gap doubles after each repeat up to this (`repeat_loop`)
REPEAT_WAIT = 1.25 * REPEAT_MAX  # how long a member waits for a repeat it needs (replays)


class GroupTransport(Protocol):
    """What the node provides: a topic, a content-addressed store, and a fetcher."""

    async def publish(self, data: bytes) -> None: ...

    # make `payload` available by content; return its checksum
    async def serve(self, checksum_owner: str, payload: bytes) -> bytes: ...

    async def fetch(self, holders: Sequence[str], checksum: bytes, nbytes: int) -> bytes:
        """Verified payload bytes from any of `holders`, which the transport then also serves
        (a fetched copy is as good as the sender's: it is addressed by checksum); raises on
        failure."""
        ...


class UpdateGossip:
    """The announce/pull machinery of one member for one run."""

    def __init__(
        self,
        *,
        run_id: str,
        key_pair: KeyPair,
        transport: GroupTransport,
        expected_nbytes: int,
        is_member: Callable[[str], bool],
        expected: Callable[[int], set[str]],
        nbytes_of: Callable[[int], int] | None = None,
    ):
        """`expected_nbytes`: the size of every update, or the largest when `nbytes_of(round)`
        gives each round's own (Streaming DiLoCo: the round is a slot, the size its fragment's)."""
        self.run_id = run_id
        self.key_pair = key_pair
        self.me = ID.from_pubkey(key_pair.public_key).to_base58()
        self.transport = transport
        self.expected_nbytes = expected_nbytes
        self.nbytes_of = nbytes_of or (lambda round_: expected_nbytes)
        self.is_member = is_member  # may this peer send updates at all (live lease in RunState)
        self.admits: Callable[[str], bool] = lambda peer: True  # invite runs: certified only
        # whose messages we forward: a live lease in RunState (what `is_member` says until a
        # driver narrows it to its counted group)
        self.leased: Callable[[str], bool] = is_member
        self.dropped: Counter[str] = Counter()  # non-members' announcements and records, by kind
        self.expected = expected  # whose updates round r waits for
        # the newest round the run's trusted signers attest (the driver's): see `_complete`
        self.trusted_round: Callable[[], int] = lambda: -1
        self.current_round = 0
        self.window = ROUND_WINDOW  # rounds ahead we accept (a streaming run's rounds are slots)
        self._rounds: dict[int, GossipRound] = {}
        self.rejected = 0
        self._pulls = trio.CapacityLimiter(MAX_PULLS)
        self.pace = RoundPace()  # whom an open round stops waiting for (round_pace.py)
        self.bytes_published = 0
        self.bytes_fetched = 0
        self.records = RoundRecords(run_id=run_id, key_pair=key_pair)  # share the topic
        self._own: dict[int, dict[str, Repeat]] = {}  # round → our announcement, record
        # told of each payload as it is in (ours first): the member checks it then (admit)
        self.on_payload: Callable[[str, bytes], Awaitable[None]] | None = None
        self.shard_inbox: Callable[[str, bytes], bool | None] | None = None

    # -- inbound --------------------------------------------------------------------------------

    def validate(self, origin: str, raw: bytes) -> bool | None:
        """Gossip validator: verify and record an announcement (or a round record); False
        rejects (and penalises)."""
        if not self.admits(origin):  # invite runs: before anything is opened, kept or forwarded
            self.dropped["records" if is_record(raw) else "announcements"] += 1
            return False
        if is_shard_message(raw):  # a sharded round's (group/sharded_updates.py), if we run one
            return self.shard_inbox(origin, raw) if self.shard_inbox is not None else None
        if is_record(raw):  # (bounded in size by its envelope before anything else)
            return self.records.validate(origin, raw) and self._forwarded(origin)
        try:
            round_, ann = self._open(origin, raw)
        except ProtocolError as exc:
            self.rejected += 1
            log.info("rejected update announcement from %s: %s", origin, exc)
            return False
        if not self._in_window(round_):  # honest peers run ahead or lag: never penalise
            return self._forwarded(origin)
        # the last closed round too: an announcement that came after we closed it names an
        # update a replay of that round may need (replay.py); nothing is pulled for it now
        state = self._rounds.get(round_) if round_ < self.current_round else self._round(round_)
        if state is None:
            return self._forwarded(origin)
        state.record(origin, ann, self.is_member)
        return self._forwarded(origin)

    def _forwarded(self, publisher: str) -> bool | None:
        """A valid message is forwarded only when its publisher holds a live lease in the run:
        a stranger's fresh keys flood no member's mesh (None: dropped without blame)."""
        return True if self.leased(publisher) else None

    def _open(self, origin: str, raw: bytes) -> tuple[int, UpdateAnnouncement]:
        env = open_from_origin(
            raw, domain=DOMAIN, run_id=self.run_id, origin=origin, max_size=MAX_ENVELOPE
        )
        ann = decode(env.payload, UpdateAnnouncement)
        if ann.holds == (ann.sender == origin):
            raise ProtocolError("an announcement is either the sender's own or a holder's copy")
        # Membership is not checked here: an honest joiner's lease may reach us after its first
        # announcement (gossip races), and rejecting would penalise it. Non-members' updates
        # are dropped when the round closes instead.
        assert env.round is not None
        if ann.nbytes != self.nbytes_of(env.round):
            raise ProtocolError(
                f"update of {ann.nbytes} bytes, the run's updates of round {env.round} are "
                f"{self.nbytes_of(env.round)}"
            )
        return env.round, ann

    def _in_window(self, round_: int) -> bool:
        return self.current_round - 1 <= round_ <= self.current_round + self.window

    def _round(self, round_: int) -> GossipRound | None:
        if round_ < self.current_round:
            return None
        # the last closed round stays: its signed announcements let a member replay it
        for old in [r for r in self._rounds if r < self.current_round - 1]:
            del self._rounds[old]
        return self._rounds.setdefault(round_, GossipRound())

    def left(self, peer: str) -> None:
        """The node's last connection to `peer` closed (round_pace.py)."""
        if peer != self.me and self.is_member(peer):  # fresh keys come and go for free
            self.pace.left(peer)
            if (state := self._round(self.current_round)) is not None:
                state.left(peer)

    def back(self, peer: str) -> None:  # a connection to `peer` opened
        self.pace.back(peer)

    # -- one round ------------------------------------------------------------------------------

    async def exchange(self, round_: int, payload: bytes, *, deadline: float) -> list[Contribution]:
        """Publish ours, pull everyone's until all live members are in or `deadline` (trio time)."""
        self.current_round = round_
        state = self._round(round_)
        assert state is not None
        checksum = await self.transport.serve(self.me, payload)
        state.payloads[self.me] = payload
        state.arrived.setdefault(self.me, trio.current_time())
        state.announced[self.me] = UpdateAnnouncement(
            sender=self.me, nbytes=len(payload), checksum=checksum
        )
        await self._announce(round_, state.announced[self.me])
        with trio.move_on_at(deadline):
            # handing payloads on is not cut short when the last one is in: the round returns
            # once each payload it holds was handed on (the member has measured them all then)
            async with trio.open_nursery() as handing:
                if self.on_payload is not None:
                    handing.start_soon(self.on_payload, self.me, payload)
                await self._pull_all(round_, state, handing)
        expected = self.expected(round_)
        self.pace.closed(state.arrived, counted=expected)
        missing = expected - set(state.payloads)
        if missing:
            log.info(
                "round %d closed without %d member(s): %s",
                round_,
                len(missing),
                "; ".join(state.why_missing(sender) for sender in sorted(missing)[:4]),
            )
        self.current_round = round_ + 1
        strangers = sorted(s for s in state.payloads if not self.is_member(s))
        if strangers:
            log.warning("round %d: dropping updates of non-members %s", round_, strangers[:4])
        return [
            Contribution(sender=s, payload=p, checksum=state.announced[s].checksum)
            for s, p in sorted(state.payloads.items())
            if s not in strangers
        ]

    # -- replaying a closed round ---------------------------------------------------------------

    def signed_checksum(self, round_: int, sender: str) -> bytes | None:
        """The checksum `sender` itself signed for its update of `round_` (if we saw it)."""
        ann = state.announced.get(sender) if (state := self._rounds.get(round_)) else None
        return ann.checksum if ann is not None else None

    async def wait_signed_checksum(self, round_: int, sender: str) -> bytes | None:
        """`signed_checksum`, waiting for a repeat of the announcement (`repeat_loop`) when we
        have not seen it yet: a member that closed the round without it lost it to gossip."""
        with trio.move_on_after(REPEAT_WAIT):
            while self.signed_checksum(round_, sender) is None:  # noqa: ASYNC110 - announcements arrive in a sync validator, with no event that outlives the round
                await trio.sleep(0.1)
        return self.signed_checksum(round_, sender)

    async def fetch_update(self, round_: int, sender: str, holders: Sequence[str]) -> bytes:
        """`sender`'s update of `round_` by the checksum it signed, from it, the holders we know
        of, or `holders`; raises LookupError if it never announced one, else what the transport
        raises."""
        state = self._rounds.get(round_)
        ann = state.announced.get(sender) if state is not None else None
        if state is None or ann is None:
            raise LookupError(f"no signed announcement of {sender} for round {round_}")
        known = self._member_holders(state, ann)
        ask = [*known, *[h for h in holders if h not in known]]
        async with self._pulls:
            payload = await self.transport.fetch(ask, ann.checksum, ann.nbytes)
        self.bytes_fetched += len(payload)
        return payload

    def count(self, *, fetched: int = 0, published: int = 0) -> None:  # a sharded round's, too
        self.bytes_fetched += fetched
        self.bytes_published += published

    async def publish_record(self, round_: int, record: RoundRecord) -> None:
        sealed = self.records.seal(round_, record)
        self._own.setdefault(round_, {})["record"] = Repeat(sealed)
        await self.transport.publish(sealed)

    async def repeat_loop(self, first: float = REPEAT_EVERY, most: float = REPEAT_MAX) -> None:
        """Publish our announcement and record of the open and the last closed round again,
        `first` seconds after each was sent, then at gaps doubling up to `most`: gossip loses
        messages, and a peer that missed our one announcement would aggregate another set (seen
        under load: every member alone with its update). Receivers drop the copies."""
        while True:
            await trio.sleep(first / 4)
            now = trio.current_time()
            for round_ in sorted(self._own):
                if round_ < self.current_round - 1:
                    del self._own[round_]  # no peer in its window takes it any more
                    continue
                for repeat in list(self._own[round_].values()):
                    if repeat.due(now, first, most):
                        await self.transport.publish(repeat.sealed)

    def spread(self, round_: int) -> float:  # seconds from its first update in to its last
        return s.spread() if (s := self._rounds.get(round_)) is not None else 0.0

    def received(self, round_: int) -> tuple[int, int]:  # (in, waited for): for `progress`
        expected = self.expected(round_)
        state = self._rounds.get(round_)
        return len(expected & set(state.payloads) if state else ()), len(expected)

    def _complete(self, round_: int, state: GossipRound) -> bool:
        """Nobody's update is waited for any more (round_pace.py), or the group moved on: its
        signers attest round r + 2, or r + 1 and repeats had their time (their closing r while
        we pull is the usual race; past it, we waited for members that had finished the run)."""
        expected, now = self.expected(round_), trio.current_time()
        ahead = self.trusted_round() - round_
        if ahead > 1 or ahead == 1 and now - state.arrived.get(self.me, now) > REPEAT_WAIT:
            return True
        return not state.waiting_for(expected - self.pace.gone.keys(), self.pace, now, self.me)

    async def _pull_all(self, round_: int, state: GossipRound, handing: trio.Nursery) -> None:
        """Pull every announced member's update until the round's are all in."""
        async with trio.open_nursery() as nursery:
            fetching: set[str] = set()
            while not self._complete(round_, state):
                for sender, ann in list(state.announced.items()):
                    if sender in state.payloads or sender in fetching:
                        continue
                    if not self.is_member(sender):
                        continue  # not now: a joiner's lease may still be on its way
                    fetching.add(sender)
                    nursery.start_soon(self._pull, round_, state, ann, fetching, handing)
                state.changed = trio.Event()
                if self._complete(round_, state):
                    break
                with trio.move_on_after(1.0):  # membership may change without an announcement
                    await state.changed.wait()
            nursery.cancel_scope.cancel()

    async def _pull(
        self,
        round_: int,
        state: GossipRound,
        ann: UpdateAnnouncement,
        fetching: set[str],
        handing: trio.Nursery,
    ) -> None:
        """Fetch one announced update; after `FETCH_TRIES` failures from the holders known so
        far, wait for another holder to announce instead of asking the same ones again."""
        tries = 0
        while True:
            holders = self._member_holders(state, ann)
            asked = trio.current_time()
            try:
                async with self._pulls:
                    payload = await self.transport.fetch(holders, ann.checksum, ann.nbytes)
            except Exception as exc:  # noqa: BLE001 - the transport's own errors (the node's TransferFailed, a reset stream) are retried, then logged at warning
                tries += 1
                took = trio.current_time() - asked
                state.failed(ann.sender, f"{type(exc).__name__} after {took:.1f} s: {exc}"[:160])
                if tries < FETCH_TRIES:
                    log.debug("round %d: update of %s not fetched yet: %s", round_, ann.sender, exc)
                    await trio.sleep(FETCH_PAUSE)
                    continue
                log.warning(
                    "round %d: update of %s not fetched from %d holder(s) in %d tries (%s); "
                    "waiting for another holder",
                    round_,
                    ann.sender,
                    len(holders),
                    tries,
                    exc,
                )
                await state.another_holder(ann.checksum, len(holders))
                tries = 0
                continue
            state.payloads[ann.sender] = payload
            state.arrived.setdefault(ann.sender, trio.current_time())
            self.bytes_fetched += len(payload)
            fetching.discard(ann.sender)
            state.changed.set()  # the round may close now; telling others we hold it can follow
            if self.on_payload is not None:
                handing.start_soon(self.on_payload, ann.sender, payload)
            await self._announce(
                round_,
                UpdateAnnouncement(
                    sender=ann.sender, nbytes=ann.nbytes, checksum=ann.checksum, holds=True
                ),
            )
            return

    def _member_holders(self, state: GossipRound, ann: UpdateAnnouncement) -> list[str]:
        """Whom to ask for `ann`'s payload: its sender, then holders that are members."""
        holders = [h for h in state.holders.get(ann.checksum, ()) if self.is_member(h)]
        return [ann.sender, *[h for h in holders if h != ann.sender]]

    async def _announce(self, round_: int, ann: UpdateAnnouncement) -> None:
        env = seal(self.key_pair, domain=DOMAIN, run=self.run_id, round=round_, payload=encode(ann))
        sealed = env.to_bytes()
        if not ann.holds:
            self._own[round_] = {"announcement": Repeat(sealed)}  # a new update replaces a record
        await self.transport.publish(sealed)
        if not ann.holds:
            self.bytes_published += ann.nbytes
