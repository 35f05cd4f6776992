"""Gossipsub's sender records, checked once per record instead of once per message.

py-libp2p 0.8.1 attaches the sender's signed peer record (an Ed25519-signed envelope of its
addresses) to every pubsub RPC, and checks it on receipt — twice for an RPC with control
messages (pubsub's read loop, then gossipsub's control handler): an envelope parse, a
signature check and a peerstore update each time, ≈ 110-170 µs. Profiled in a daemon of the
Sybil e2e (ten daemons, three runs on two cores), that was 16.5 % of its event loop's CPU.
A peer sends the same bytes until its addresses change, so we remember, per host and peer, the
last record that passed (as a 16-byte digest: a fresh key may sign a record as big as an RPC,
and the peerstore already keeps one copy) and skip the check while the same bytes come again.
Different bytes (a new record, or a replay of an old one) take py-libp2p's full path, which
keeps its rules: a bad signature, a record of another peer or an older sequence number still
fails the RPC. The peerstore's copy is refreshed every `REFRESH_SECONDS`, well inside its 2 h TTL.
"""

from __future__ import annotations

import functools
import hashlib
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable

from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.pubsub.pb.rpc_pb2 import RPC

REFRESH_SECONDS = 600.0
PEERS_REMEMBERED = 4096  # per host; the oldest is forgotten first (and then checked again)

FullCheck = Callable[[RPC, IHost, ID], bool]


class SenderRecordMemo:
    """A drop-in for py-libp2p's `maybe_consume_signed_record(msg, host, peer_id)`."""

    def __init__(self, full_check: FullCheck):
        self.full_check = full_check
        self.full_checks = 0  # how often the full path ran (the rest were remembered)
        # host -> peer ID bytes -> (record digest, when it last passed the full check)
        self._passed: weakref.WeakKeyDictionary[IHost, OrderedDict[bytes, tuple[bytes, float]]]
        self._passed = weakref.WeakKeyDictionary()

    def __call__(self, msg: RPC, host: IHost, peer_id: ID) -> bool:
        if not msg.HasField("senderRecord"):
            return True
        record = hashlib.blake2b(msg.senderRecord, digest_size=16).digest()
        passed = self._passed.setdefault(host, OrderedDict())
        key = peer_id.to_bytes()
        seen = passed.get(key)
        now = time.monotonic()
        if seen is not None and seen[0] == record and now - seen[1] < REFRESH_SECONDS:
            passed.move_to_end(key)
            return True
        self.full_checks += 1
        if not self.full_check(msg, host, peer_id):
            return False
        passed[key] = (record, now)
        passed.move_to_end(key)
        while len(passed) > PEERS_REMEMBERED:
            passed.popitem(last=False)
        return True


@functools.cache
def check_sender_records_once() -> SenderRecordMemo:
    """Install one memo in py-libp2p's pubsub and gossipsub modules (internal names of the
    pinned version, looked up on each use: this holds for every Pubsub of the process)."""
    from libp2p.pubsub import gossipsub, pubsub, utils

    memo = SenderRecordMemo(utils.maybe_consume_signed_record)
    pubsub.maybe_consume_signed_record = gossipsub.maybe_consume_signed_record = memo  # type: ignore[assignment]
    return memo
