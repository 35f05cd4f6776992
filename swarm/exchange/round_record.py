"""Round records: what a member started a round from, which updates it aggregated, what it got.

After each outer step a member signs and publishes (on the run's update topic) a `RoundRecord`
for round r: the checksum of the state it started from, the (sender, checksum) of every update
it aggregated, and the checksum of the state it ended with. Aggregation is deterministic for a
given set (swarm/aggregation, tested bit for bit), so a member whose result differs from the
trusted one but whose start state matches need not download megabytes of state: it fetches the
updates it lacked, each one checked against its *sender's* signed announcement (a record signer
merely forwards; forwarding is not signing), and applies the round again (`DiLoCoDriver`).

Only records of trusted signers (`trusted(peer)`: anchors, or certified members) are kept,
at most `MAX_RECORD_SIGNERS` per round and for the last `KEPT_ROUNDS` rounds: strangers' records
cost a signature check and nothing else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Annotated

from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from peertrain.protocol.envelope import Envelope, claimed_domain, open_envelope, seal
from peertrain.protocol.errors import ProtocolError
from peertrain.protocol.messages import Message, decode, encode, message
from peertrain.protocol.schema import MaxLen

RECORD_DOMAIN = "diloco/round-record"
MAX_RECORD_UPDATES = 256  # gossip_round.MAX_SENDERS
MAX_RECORD_ENVELOPE = 40 * 1024
MAX_RECORD_SIGNERS = 64
KEPT_ROUNDS = 2


@message("diloco/recorded-update", max_size=256)
class RecordedUpdate(Message):
    sender: Annotated[str, MaxLen(128)]
    checksum: Annotated[bytes, MaxLen(32)]


@message("diloco/round-record", max_size=MAX_RECORD_ENVELOPE - 1024)
class RoundRecord(Message):
    start: Annotated[bytes, MaxLen(32)]  # checksum of the state the round started from
    updates: Annotated[tuple[RecordedUpdate, ...], MaxLen(MAX_RECORD_UPDATES)]  # sorted by sender
    result: Annotated[bytes, MaxLen(32)]  # checksum of the state after the outer step

    @property
    def updates_digest(self) -> bytes:
        """One hash of the aggregated set (what two members compare first)."""
        h = hashlib.blake2b(digest_size=16)
        for u in sorted(self.updates, key=lambda u: u.sender):
            h.update(u.sender.encode() + b"\0" + u.checksum)
        return h.digest()


def is_record(raw: bytes) -> bool:
    """Does this envelope claim the record domain? (Peek only: `RoundRecords.validate` checks.)"""
    return claimed_domain(raw, max_size=MAX_RECORD_ENVELOPE) == RECORD_DOMAIN


def open_from_origin(
    raw: bytes, *, domain: str, run_id: str, origin: str, max_size: int
) -> Envelope:
    """A run's gossip envelope (any round) that `origin`, the peer that published it, sealed
    itself: a forwarder cannot pass off another's message. ProtocolError otherwise."""
    return open_envelope(
        raw,
        expected_domain=domain,
        expected_run=run_id,
        expected_round=range(0, 2**62),
        expected_sender=ID.from_base58(origin).to_bytes(),
        max_size=max_size,
    )


class RoundRecords:
    """Trusted signers' records of the last rounds, as they arrive."""

    def __init__(self, *, run_id: str, key_pair: KeyPair) -> None:
        self.run_id, self.key_pair = run_id, key_pair
        self.trusted: Callable[[str], bool] = lambda peer: False  # the driver says whom
        self._rounds: dict[int, dict[str, RoundRecord]] = {}

    def seal(self, round_: int, record: RoundRecord) -> bytes:
        env = seal(
            self.key_pair,
            domain=RECORD_DOMAIN,
            run=self.run_id,
            round=round_,
            payload=encode(record),
        )
        self.keep(round_, ID.from_pubkey(self.key_pair.public_key).to_base58(), record)
        return env.to_bytes()

    def validate(self, origin: str, raw: bytes) -> bool:
        """Gossip validator for records: False (penalise) if it is no valid record of `origin`."""
        try:
            env = open_from_origin(
                raw,
                domain=RECORD_DOMAIN,
                run_id=self.run_id,
                origin=origin,
                max_size=MAX_RECORD_ENVELOPE,
            )
            record = decode(env.payload, RoundRecord)
        except ProtocolError:
            return False
        assert env.round is not None
        if self.trusted(origin):
            self.keep(env.round, origin, record)
        return True

    def keep(self, round_: int, signer: str, record: RoundRecord) -> None:
        newest = max(self._rounds, default=round_)
        if round_ <= newest - KEPT_ROUNDS:
            return
        signers = self._rounds.setdefault(round_, {})
        if signer in signers or len(signers) < MAX_RECORD_SIGNERS:
            signers[signer] = record
        for old in [r for r in self._rounds if r <= max(newest, round_) - KEPT_ROUNDS]:
            del self._rounds[old]

    def matching(self, round_: int, *, start: bytes, result: bytes) -> RoundRecord | None:
        """A trusted record of `round_` from `start` to `result`, if one arrived."""
        for signer, record in sorted(self._rounds.get(round_, {}).items()):
            if self.trusted(signer) and record.start == start and record.result == result:
                return record
        return None
