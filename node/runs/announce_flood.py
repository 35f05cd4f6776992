"""`--attack announce-flood`: a hostile member floods its run with announcements of fresh keys.

A research and test hook like the other `--attack`s (`swarm local --hostile K`), and the attack
an open run must shrug off: peer IDs are free, so beside training as usual this member makes
`FRESH_KEYS` keys of its own and, once for each of the next two rounds, signs an update
announcement of the right size with each and pushes it into gossipsub as that key's own message
(signed by the key, as strict signing demands), past its own validator. Before members recorded
their own announcements first (swarm/exchange/gossip_round.py), the strangers filled each round's
table and every round closed at its deadline with each member's own update alone. Nothing is
served behind the announcements.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

import trio
import trio.lowlevel
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import PUBSUB_SIGNING_PREFIX
from peertrain.protocol.envelope import seal
from peertrain.protocol.messages import encode

from ..services.gossip import Gossip
from .update_exchange import update_topic

log = logging.getLogger(__name__)

ATTACK = "announce-flood"
FRESH_KEYS = 256
LOOK_EVERY = 0.5  # seconds between looks at the member's round


async def announce_flood(
    gossip: Gossip, run_id: str, current_round: Callable[[], int], nbytes: int
) -> None:
    """Flood rounds r + 1 and r + 2 of `run_id` (r = `current_round()`) once each, for ever."""
    from peertrain.swarm.exchange.gossip import DOMAIN, UpdateAnnouncement

    keys = await trio.to_thread.run_sync(lambda: [create_new_key_pair() for _ in range(FRESH_KEYS)])
    log.warning("this member is hostile: %d fresh keys flood update announcements", len(keys))
    pubsub, topic = gossip.pubsub, update_topic(run_id)
    flooded: set[int] = set()
    while True:
        for round_ in (current_round() + 1, current_round() + 2):
            if round_ in flooded:
                continue
            flooded.add(round_)
            for key in keys:
                sender = ID.from_pubkey(key.public_key).to_base58()
                ann = UpdateAnnouncement(
                    sender=sender, nbytes=nbytes, checksum=secrets.token_bytes(32)
                )
                sealed = seal(key, domain=DOMAIN, run=run_id, round=round_, payload=encode(ann))
                await pubsub.router.publish(
                    pubsub.my_id, _as_its_own(key, topic, sealed.to_bytes())
                )
                await trio.lowlevel.checkpoint()
        await trio.sleep(LOOK_EVERY)


def _as_its_own(key: KeyPair, topic: str, data: bytes) -> rpc_pb2.Message:
    """A gossipsub message published by `key`'s peer, signed by it."""
    msg = rpc_pb2.Message(
        data=data,
        topicIDs=[topic],
        from_id=ID.from_pubkey(key.public_key).to_bytes(),
        seqno=time.time_ns().to_bytes(8, "big"),
    )
    msg.signature = key.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
    msg.key = key.public_key.serialize()
    return msg
