"""Gossip: py-libp2p's gossipsub, tuned and fenced for our use.

What py-libp2p 0.8.1 does by default (docs/libp2p-notes.md) and what we do about it:
- heartbeat every 120 s: meshes form slowly and gossip repair is rare → 1 s;
- spam protection drops > 10 msgs/s per peer and topic, and internal queues of 32 drop bursts
  regardless → we pace our own publishes per topic with a token bucket (`max_rate`), batch
  upstream (CRDT deltas), and keep anti-entropy as the backstop for what gossip loses;
- a message over 1 MiB returns no error and reaches nobody → `publish` refuses anything over
  `MAX_GOSSIP_MESSAGE` with `MessageTooLarge`; big payloads announce-and-pull over streams;
- each peer's outbound queue and each subscription's queue hold 32 messages and drop the rest
  with a debug log → `count_libp2p_drops` counts them (`dropped_by_libp2p` in /metrics, a
  warning on the first and every hundredth). Measured with ten daemons in three runs on two
  cores (the Sybil e2e): thousands of outbound drops per daemon, and members' update
  announcements lost for whole 30 s rounds, repeats included. Queues 256 deep dropped as much
  (the writers cannot keep up with forwarding at mesh degree 6), so the depth stays py-libp2p's;
  the remedy is fewer messages: update gossip's repeats at doubling gaps cut the rounds that
  closed without a member's update from 8-28 to 2-4 per run, with drops still in thousands.
Every topic gets a validator at the first hop: a message that fails it is not forwarded, and
its publisher — who signed it (strict signing) — is penalised, never the peer that forwarded
it; a validator may also drop a message without blame (None). Subscriptions hand messages over
through bounded channels: a slow consumer drops the newest messages (counted) rather than
growing memory.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from peertrain.protocol.errors import MessageTooLarge

from ..net.penalties import PeerScoreboard
from .sender_records import check_sender_records_once

log = logging.getLogger(__name__)

MAX_GOSSIP_MESSAGE = 512 * 1024  # well under py-libp2p's silent 1 MiB cut, with room for framing
LIBP2P_DROPS = Counter[str]()  # "outbound", "subscription": what py-libp2p's queues dropped
INVALID_MESSAGE_PENALTY = 20.0

# (publisher's base58 peer ID, data) -> True: accept; False: reject, the publisher is to blame;
# None: drop without blame (what a clock or staleness explains)
Validator = Callable[[str, bytes], bool | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipMessage:
    sender: (
        str  # base58 ID of the original publisher (gossipsub signs messages; strict signing is on)
    )
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GossipStatistics:
    topics: int
    published: int
    delivered: int
    dropped_slow_consumer: int
    dropped_by_libp2p: int  # py-libp2p's own queues, in this process (all its nodes together)
    rejected: int  # failed validation: their publishers were penalised
    ignored: int  # dropped without blame (a clock or staleness explains them)


class MessageRateLimiter:
    """`rate` messages per second, at most `burst` saved; `take` waits for a message's turn.
    (Bytes per second are node/net/uplink.py's `TokenBucket`.)"""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self._tokens = burst
        self._at = trio.current_time()

    async def take(self) -> None:
        while True:
            now = trio.current_time()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await trio.sleep((1 - self._tokens) / self.rate)


@functools.cache
def count_libp2p_drops() -> None:
    """Count what py-libp2p's per-peer outbound queues and subscription queues drop (its
    internals, pinned version: the names are looked up on each use, so this holds for every
    Pubsub of the process)."""
    from libp2p.pubsub import gossipsub, pubsub, rpc_queue

    def counting_drop(peer_id: ID, rpc) -> None:
        _dropped("outbound", f"for {peer_id}")
        rpc_queue.drop_rpc(peer_id, rpc)

    pubsub.drop_rpc = gossipsub.drop_rpc = counting_drop  # type: ignore[assignment]
    deliver = pubsub.Pubsub.notify_subscriptions

    def counting_delivery(self: Pubsub, message) -> None:
        for topic in message.topicIDs:
            if topic in self.topic_ids:
                queue = self.subscribed_topics_send[topic].statistics()
                if queue.current_buffer_used >= queue.max_buffer_size:
                    _dropped("subscription", f"on {topic}")  # py-libp2p drops it
        deliver(self, message)

    pubsub.Pubsub.notify_subscriptions = counting_delivery  # type: ignore[method-assign]


def _dropped(queue: str, where: str) -> None:
    LIBP2P_DROPS[queue] += 1
    if LIBP2P_DROPS[queue] % 100 == 1:  # the first, then every hundredth
        log.warning(
            "gossip: py-libp2p's %s queue is full, a message %s dropped (%d so far)",
            queue,
            where,
            LIBP2P_DROPS[queue],
        )


class Gossip:
    """The node's pubsub service. `await nursery.start(gossip.run)`, then subscribe / publish."""

    def __init__(
        self,
        host: IHost,
        scoreboard: PeerScoreboard,
        *,
        heartbeat: float = 1.0,
        max_rate: float = 8.0,
        queue_size: int = 256,
    ):
        self.host = host
        self.scoreboard = scoreboard
        self.max_rate = max_rate
        self.queue_size = queue_size
        self.router = GossipSub(
            protocols=[PROTOCOL_ID_V11],
            degree=6,
            degree_low=4,
            degree_high=12,
            heartbeat_interval=heartbeat,
            heartbeat_initial_delay=0.1,  # type: ignore[arg-type]
            spam_protection_enabled=False,
        )
        count_libp2p_drops()
        check_sender_records_once()
        self.pubsub = Pubsub(host, self.router, strict_signing=True)
        # py-libp2p numbers our messages from the clock's seconds, one up per message, and peers
        # drop a (sender, number) seen in the last two minutes. We publish several a second, so
        # that counter runs ahead of the clock, and a daemon restarted within its lead reused
        # numbers of its last life: everything it said was dropped as a duplicate (a member
        # killed in a churn run never got an update to anyone again). Nanoseconds cannot be
        # outrun by one message each, so every life numbers above the last.
        self.pubsub.counter = time.time_ns()
        self._buckets: dict[str, MessageRateLimiter] = {}
        self._published = self._delivered = self._dropped = self._rejected = self._ignored = 0
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[Gossip] = trio.TASK_STATUS_IGNORED) -> None:
        async with background_trio_service(self.pubsub), background_trio_service(self.router):
            await self.pubsub.wait_until_ready()
            # Pubsub learns of peers from connection events; ones connected before it was
            # constructed would never hear of us. Adopt them (py-libp2p internal, pinned version).
            for peer in self.host.get_connected_peers():
                if peer not in self.pubsub.peers:
                    self.pubsub.manager.run_task(self.pubsub._handle_new_peer_safe, peer)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._reannounce_loop)
                task_status.started(self)
                await trio.sleep_forever()

    async def _reannounce_loop(self, interval: float = 2.0) -> None:
        """Tell newly registered pubsub peers our subscriptions again. py-libp2p builds a new
        peer's hello before an await, and `subscribe` announces only to peers registered at that
        moment: a peer registered in between never learns the topic (seen in ~3 of 20 runs)."""
        known: set[ID] = set()
        while True:
            await trio.sleep(interval)
            peers = set(self.pubsub.peers)
            if peers - known and self.pubsub.topic_ids:
                for topic in list(self.pubsub.topic_ids):
                    packet, subopt = self.pubsub._build_announce_rpc(topic, subscribe=True)
                    await self.pubsub.message_all_peers(packet.SerializeToString(), announce=subopt)
            known = peers

    async def subscribe(
        self, topic: str, validator: Validator | None = None
    ) -> trio.MemoryReceiveChannel[GossipMessage]:
        """Messages on `topic` that pass `validator(sender, data)`, through a bounded channel."""
        assert self._nursery is not None, "Gossip is not running"
        if validator is not None:
            self.pubsub.set_topic_validator(topic, self._guard(topic, validator), False)
        subscription = await self.pubsub.subscribe(topic)
        send, receive = trio.open_memory_channel[GossipMessage](self.queue_size)
        self._nursery.start_soon(self._pump, subscription, send)
        return receive

    async def unsubscribe(self, topic: str) -> None:
        await self.pubsub.unsubscribe(topic)
        self.pubsub.remove_topic_validator(topic)

    async def publish(self, topic: str, data: bytes) -> None:
        if len(data) > MAX_GOSSIP_MESSAGE:
            raise MessageTooLarge(
                f"{len(data)} bytes is over the gossip limit of {MAX_GOSSIP_MESSAGE}; "
                "announce large payloads and serve them over a stream"
            )
        bucket = self._buckets.setdefault(
            topic, MessageRateLimiter(self.max_rate, burst=self.max_rate)
        )
        await bucket.take()
        await self.pubsub.publish(topic, data)
        self._published += 1

    def topic_peers(self, topic: str) -> list[ID]:
        return list(self.pubsub.peer_topics.get(topic, ()))

    def statistics(self) -> GossipStatistics:
        return GossipStatistics(
            topics=len(self.pubsub.topic_ids),
            published=self._published,
            delivered=self._delivered,
            dropped_slow_consumer=self._dropped,
            dropped_by_libp2p=sum(LIBP2P_DROPS.values()),
            rejected=self._rejected,
            ignored=self._ignored,
        )

    def _guard(self, topic: str, validator: Validator):
        def check(forwarder: ID, msg) -> bool:
            publisher = ID(msg.from_id)
            try:
                verdict = validator(publisher.to_base58(), msg.data)
            except Exception as exc:  # noqa: BLE001 - a validator bug must not let garbage through
                log.warning("validator for %s raised %r; rejecting", topic, exc, exc_info=True)
                return False  # our bug: nobody to blame
            if verdict is None:
                self._ignored += 1
                return False
            if not verdict and publisher != self.host.get_id():
                self._rejected += 1
                self.scoreboard.penalise(
                    publisher.to_base58(),
                    INVALID_MESSAGE_PENALTY,
                    f"signed an invalid message on {topic}",
                )
            return bool(verdict)

        return check

    async def _pump(self, subscription, send: trio.MemorySendChannel[GossipMessage]) -> None:
        async with send:
            while True:
                msg = await subscription.get()
                if ID(msg.from_id) == self.host.get_id():
                    continue  # our own publish, echoed back
                try:
                    send.send_nowait(
                        GossipMessage(sender=ID(msg.from_id).to_base58(), data=msg.data)
                    )
                    self._delivered += 1
                except trio.WouldBlock:
                    self._dropped += 1
                except trio.BrokenResourceError:
                    return
