"""Everything signed that a member of a sharded round has received, checked as it arrives.

Only the round's group may write here, each sender once per kind and slot: a stranger's message
costs a signature check; a member's second, different commitment is kept as proof that it
equivocated (two signed statements of one round), and the member is out of the round.

Every message's payload opens with the tag of the group its sender took the round's to be
(`group_tag`). Members plan the shards by the group, and an honest member's view of it can
differ for a while (restarted from a checkpoint, joining, its registry behind): its messages
then belong to another round, not to a liar. Once they were judged by our plan, and a 25M run's
restarted member and late joiner (a group of 5) and the other three (a group of 4) penalised
each other for "malformed" commitments, outputs and checks until bans followed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import blake3
import trio
from libp2p.peer.id import ID
from peertrain.protocol.envelope import claimed_domain, open_envelope
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.messages import Message, decode

from .messages import NonceReveal, SenderChecks, ShardCommitment, ShardOutput, ShardStatistics

log = logging.getLogger(__name__)

DOMAIN = "exchange/shard"
MAX_ENVELOPE = 600 * 1024  # the largest statistics message (256 × 256 float64) and its seal
EQUIVOCATION = 100.0  # penalty: two signed commitments for one round
GROUP_TAG = 16  # bytes of the group's digest that open every message's payload


def group_tag(members: Collection[str]) -> bytes:
    """The tag of a round's group, alike on every member holding the same view of it."""
    return blake3.blake3("\n".join(sorted(members)).encode()).digest()[:GROUP_TAG]


def is_shard_message(raw: bytes) -> bool:
    """Does this envelope claim a sharded round's domain? (Peek only: `Board.receive` checks.)"""
    return claimed_domain(raw, max_size=MAX_ENVELOPE) == DOMAIN


@dataclass
class Board:
    run_id: str
    round_: int
    members: Collection[str]
    sizes: tuple[int, ...]  # each shard's payload bytes in the run's codec: nothing else is fetched
    on_penalty: Callable[[str, str], None] = lambda peer, why: None
    commitments: dict[str, ShardCommitment] = field(default_factory=dict)
    equivocators: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)  # the two proofs
    statistics: dict[tuple[int, str], ShardStatistics] = field(default_factory=dict)
    outputs: dict[tuple[int, int, str], ShardOutput] = field(default_factory=dict)
    reveals: dict[tuple[int, str], NonceReveal] = field(default_factory=dict)
    checks: dict[tuple[int, str], SenderChecks] = field(default_factory=dict)
    _raw_commitments: dict[str, bytes] = field(default_factory=dict)
    _changed: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        self.tag = group_tag(self.members)

    def receive(self, raw: bytes) -> None:
        """A broadcast envelope: stored if it is a group member's and new; dropped otherwise."""
        try:
            env = open_envelope(
                raw,
                expected_domain=DOMAIN,
                expected_run=self.run_id,
                expected_round=self.round_,
                max_size=MAX_ENVELOPE,
            )
            sender = ID(env.sender).to_base58()
            if sender not in self.members:
                return  # not of this round's group: cost us a signature check, nothing more
            if env.payload[:GROUP_TAG] != self.tag:
                log.debug("a sharded-round message of %s for another view of the group", sender)
                return  # its sender plans another round's shards: not ours to judge
            msg = decode(
                env.payload[GROUP_TAG:],
                (ShardCommitment, ShardStatistics, ShardOutput, NonceReveal, SenderChecks),
            )
        except ProtocolError as exc:
            log.debug("refused a sharded-round message: %s", exc)
            return
        if (wrong := self._malformed(msg)) is not None:
            self.on_penalty(sender, f"a malformed {type(msg).__name__}: {wrong}")
            return
        if self._store(sender, msg, raw):
            self._changed.set()
            self._changed = trio.Event()

    def _malformed(self, msg: Message) -> str | None:
        """What makes a well-signed message unusable (sizes that do not fit this round)."""
        n = len(self.sizes)
        if isinstance(msg, ShardCommitment):
            ok = len(msg.digests) == n and all(len(d) == 32 for d in msg.digests)
            if not ok or tuple(msg.sizes) != self.sizes:
                return (
                    f"slices of {list(msg.sizes)[:4]} bytes, the round's are {list(self.sizes)[:4]}"
                )
            return None
        if isinstance(msg, ShardStatistics):
            p = len(msg.senders)
            if (
                msg.shard >= n
                or len(set(msg.senders)) != p
                or not set(msg.senders) <= set(self.members)
            ):
                return "a shard or senders not of this round"
            if len(msg.sq_norms) != 8 * p or len(msg.gram) not in (0, 8 * p * p):
                return f"statistics of the wrong size for {p} senders"
        if isinstance(msg, ShardOutput) and (msg.shard >= n or msg.nbytes != self.sizes[msg.shard]):
            return f"an output of {msg.nbytes} bytes for shard {msg.shard} of {n}"
        if isinstance(msg, SenderChecks):
            sizes = {len(msg.projections), len(msg.sq_norms), len(msg.rows)}
            if sizes != {8 * n}:
                return f"checks of the wrong size for {n} shards"
        return None

    def _store(self, sender: str, msg: Message, raw: bytes) -> bool:
        if isinstance(msg, ShardCommitment):
            return self._commit(sender, msg, raw)
        table: dict
        key: tuple
        if isinstance(msg, ShardStatistics):
            table, key = self.statistics, (msg.shard, sender)
        elif isinstance(msg, ShardOutput):
            table, key = self.outputs, (msg.attempt, msg.shard, sender)
        elif isinstance(msg, NonceReveal):
            table, key = self.reveals, (msg.attempt, sender)
        else:
            assert isinstance(msg, SenderChecks)
            table, key = self.checks, (msg.attempt, sender)
        if key in table:
            return False
        table[key] = msg
        return True

    def _commit(self, sender: str, msg: ShardCommitment, raw: bytes) -> bool:
        known = self.commitments.get(sender)
        if known is None:
            self.commitments[sender], self._raw_commitments[sender] = msg, raw
            return True
        if known == msg or sender in self.equivocators:
            return False
        self.equivocators[sender] = (self._raw_commitments[sender], raw)
        self.on_penalty(sender, f"two commitments for round {self.round_}: equivocation")
        return True

    def committed(self) -> list[str]:
        """Senders with one commitment this round, sorted (the equivocators are out)."""
        return sorted(s for s in self.commitments if s not in self.equivocators)

    async def wait(self, ready: Callable[[], bool], deadline: float) -> bool:
        """Until `ready()` holds (True) or trio's clock passes `deadline` (False)."""
        with trio.move_on_at(deadline):
            while not ready():
                await self._changed.wait()
            return True
        return ready()
