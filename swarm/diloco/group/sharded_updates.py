"""A DiLoCo group's rounds on the sharded exchange (swarm/exchange/sharded/), the run's choice
when its spec says `exchange = "sharded"`: each member owns a shard of every update, so a round
moves about 2 × the update per member whatever the group's size.

The group's messages share the run's update topic. A member may hear a round's messages before
it starts that round (others are faster): they wait here, bounded, and a stranger's cost a
signature check and are not forwarded. A round's group is the counted group of the round, the
same list on every member (roster.py), so every member draws the same shard owners."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

import trio
from libp2p.crypto.keys import KeyPair
from peertrain.crdt.admission import Admission
from peertrain.crdt.runstate import RunState
from peertrain.protocol.errors import ProtocolError
from peertrain.swarm.aggregation.base import Aggregator
from peertrain.swarm.diloco.group.progress import DriverProgress
from peertrain.swarm.diloco.group.replay import RoundReplay
from peertrain.swarm.diloco.group.roster import Roster
from peertrain.swarm.diloco.group.state_sync import StateSync
from peertrain.swarm.diloco.member.member import DiLoCoMember, RoundReport
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec
from peertrain.swarm.exchange.codec import Payload, ProtocolCodec
from peertrain.swarm.exchange.gossip import UpdateGossip
from peertrain.swarm.exchange.round_record import open_from_origin
from peertrain.swarm.exchange.sharded import ShardedResult, ShardedRound, ShardTransport, run_round
from peertrain.swarm.exchange.sharded.board import DOMAIN, MAX_ENVELOPE
from peertrain.swarm.exchange.sharded.round import RoundBuffers

log = logging.getLogger(__name__)

AHEAD = 2  # rounds past our current one whose messages are kept until we start them
PER_SENDER = 64  # messages kept per sender and future round (a member sends a few per attempt)
STRANGERS_ROOM = 512  # messages of senders outside the counted group, per future round


class ShardedUpdates:
    def __init__(
        self,
        *,
        run_id: str,
        me: str,
        key_pair: KeyPair,
        transport: ShardTransport,
        rule: Aggregator,
        codec: ProtocolCodec,
        numel: int,
        leased: Callable[[str], bool],
        on_penalty: Callable[[str, str], None] | None,
        counted: Callable[[str], bool] = lambda peer: False,
        at_round: Callable[[], int] = lambda: 0,
    ) -> None:
        """`counted(peer)`: is it in the counted group (room for its early messages is kept);
        `at_round()`: the round our member is in, whose messages and the next AHEAD's we keep."""
        self.run_id, self.me, self.key_pair = run_id, me, key_pair
        self.transport, self.rule, self.codec, self.numel = transport, rule, codec, numel
        self.leased, self.counted, self.at_round = leased, counted, at_round
        self.on_penalty = on_penalty or (lambda peer, why: None)
        self.current: ShardedRound | None = None
        self.last_marks: list[tuple[str, float]] = []  # the last round's phases (ShardedRound)
        self.buffers = RoundBuffers()  # every round's, reused
        self.round = 0  # the round we are in or start next
        self._pending: dict[int, dict[str, list[bytes]]] = {}  # round → sender → messages
        self._opened: dict[int, float] = {}  # round → when a counted member's first message came

    def receive(self, origin: str, raw: bytes) -> bool | None:
        """Gossip validator for the group's messages: kept for the round they belong to."""
        try:
            env = open_from_origin(
                raw, domain=DOMAIN, run_id=self.run_id, origin=origin, max_size=MAX_ENVELOPE
            )
        except ProtocolError as exc:
            log.info("refused a sharded-round message from %s: %s", origin[:12], exc)
            return False
        round_ = env.round
        if round_ is None or not self.leased(origin):
            return None  # not a member's: not kept, not forwarded, no blame (leases race)
        current = self.current
        # from the member's round, not only the last one we exchanged: a member restarted from
        # its checkpoint of round 3 (or one that adopted the group's state) kept nothing past
        # round 2, lost the others' commitments that came before its own, decided alone and
        # made every member of a 25M run dispute every shard
        low = max(self.round, self.at_round())
        if current is not None and current.round_ == round_:
            current.board.receive(raw)
        elif low <= round_ <= low + AHEAD:
            self._keep(round_, origin, raw)
            if self.counted(origin):  # a stranger's early message moves no deadline
                self._opened.setdefault(round_, trio.current_time())
        return True

    def _keep(self, round_: int, origin: str, raw: bytes) -> None:
        """A message of a round we start later: each sender has `PER_SENDER` places, senders
        outside the counted group share `STRANGERS_ROOM`, so fresh leased keys cannot take the
        room first and a member's commitment always waits for us."""
        pending = self._pending.setdefault(round_, {})
        mine = pending.setdefault(origin, [])
        if len(mine) >= PER_SENDER:
            return
        if not self.counted(origin):
            strangers = sum(len(m) for p, m in pending.items() if not self.counted(p))
            if strangers >= STRANGERS_ROOM:
                return
        mine.append(raw)

    async def exchange(
        self,
        round_: int,
        update: Payload,
        *,
        group: Collection[str],
        reference: Collection[str],
        salt: bytes,
        timeout: float,
        commit_wait: float = 0.0,
    ) -> ShardedResult:
        """Our update (as sent: the codec's payload) in, the group's checked aggregate out;
        `commit_wait`: seconds the owners wait beyond their patience for members behind us."""
        rnd = ShardedRound(
            run_id=self.run_id,
            round_=round_,
            me=self.me,
            key_pair=self.key_pair,
            group=sorted(group),
            transport=self.transport,
            rule=self.rule,
            numel=self.numel,
            codec=self.codec,
            salt=salt,
            timeout=timeout,
            commit_wait=commit_wait,
            opened_at=self._opened.get(round_),
            on_penalty=self.on_penalty,
            reference=frozenset(reference),
            buffers=self.buffers,
        )
        self.round, self.current = round_, rnd
        for messages in self._pending.pop(round_, {}).values():
            for raw in messages:
                rnd.board.receive(raw)
        self._pending = {r: m for r, m in self._pending.items() if r > round_}
        self._opened = {r: t for r, t in self._opened.items() if r > round_}
        try:
            return await run_round(rnd, update)
        finally:
            self.current, self.round, self.last_marks = None, round_ + 1, rnd.marks


class ShardedDriver(Protocol):
    """What a sharded round uses of its driver (driver.py's `DiLoCoDriver`)."""

    peer_id: str
    spec: DiLoCoSpec
    state: RunState
    admission: Admission
    gossip: UpdateGossip
    replay: RoundReplay
    roster: Roster
    progress: DriverProgress
    sync: StateSync  # `served`: the checksum of the state we serve (the round's salt)
    sharded: ShardedUpdates | None
    on_penalty: Callable[[str, str], None] | None

    @property
    def member(self) -> DiLoCoMember: ...

    async def _thread(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def _overtaken(self, round_: int) -> bool: ...

    async def _closed_alone(self, round_: int, senders: list[str]) -> bool: ...


def sharded_updates(driver: ShardedDriver, transport: ShardTransport | None) -> ShardedUpdates:
    """The sharded exchange of `driver`'s run, on the node's `transport`."""
    if transport is None:
        raise ValueError("the run's exchange is sharded: the driver needs a shard transport")
    member = driver.member
    return ShardedUpdates(
        run_id=driver.state.run_id,
        me=driver.peer_id,
        key_pair=driver.gossip.key_pair,
        transport=transport,
        rule=member.aggregator,
        codec=member.encoder.codec,
        numel=member.layout.numel,
        leased=lambda peer: driver.state.is_live(peer) or peer == driver.peer_id,
        on_penalty=driver.on_penalty,
        counted=lambda peer: peer in driver.roster.counted,
        at_round=lambda: driver.member.round,
    )


async def sharded_round(
    driver: ShardedDriver, round_: int, payload, group: Collection[str], allowance: float = 0.0
) -> RoundReport | None:
    """The driver's round on the sharded exchange: our update (as sent, int8) in, the checked
    aggregate out, then the outer step. None when the group finished the round without us.
    `allowance`: seconds the round waits for members behind us (round_pace.py)."""
    member, sharded = driver.member, driver.sharded
    assert sharded is not None
    anchors = driver.admission.anchors if not driver.admission.invite else ()
    result = await sharded.exchange(
        round_,
        payload,
        group=group,
        reference=anchors,
        salt=driver.sync.served or b"",
        timeout=driver.spec.round_timeout,
        commit_wait=allowance,
    )
    if await driver._overtaken(round_ + 1):
        return None
    driver.replay.closed([])  # no whole updates to replay: a member off the result downloads
    if await driver._closed_alone(round_, list(result.accepted)):
        return None
    driver.progress.phase = "outer step"
    started = time.perf_counter()
    report = await driver._thread(
        member.apply_aggregate, result.update, result.accepted, result.rejected
    )
    driver.progress.outer_seconds = time.perf_counter() - started
    driver.roster.contributed(set(result.accepted) | {s for s, _ in result.rejected})
    return report
