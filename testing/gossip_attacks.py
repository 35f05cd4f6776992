"""The attacker's gossip: announcement floods and forged or future-dated CRDT stamps, published
on a run's topics through a real gossipsub router on the attacker's own host.

    async with gossip_attacker(attacker) as forger:
        report = await forger.announcement_flood(run_id, round_=3, seconds=5)
        report = await forger.stamp_forgeries(run_id, victim_id, seconds=5)

Both bypass our own publish pacing (an attacker does not pace itself); what the victim's
validators do with them (drop without blame, penalise the signer) is the point.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator

import trio
import trio.lowlevel
from peertrain.crdt.hlc import Stamp
from peertrain.crdt.lwwmap import LWWMap
from peertrain.crdt.records import MEMBER, PEER, MemberInfo
from peertrain.crdt.replicator import topic_for
from peertrain.crdt.rundoc import RunDoc
from peertrain.crdt.signed import seal_delta
from peertrain.node.net.penalties import PeerScoreboard
from peertrain.node.runs.update_exchange import update_topic
from peertrain.node.services.gossip import Gossip
from peertrain.protocol.envelope import seal
from peertrain.protocol.messages import encode
from peertrain.swarm.exchange.gossip import DOMAIN, UpdateAnnouncement

from .attacks import Attacker, AttackReport

FUTURE_MS = (59_000, 3_600_000)  # just inside the drift window, and an hour ahead


class GossipForger:
    def __init__(self, attacker: Attacker, gossip: Gossip) -> None:
        self.attacker, self.gossip = attacker, gossip
        self.key = attacker.identity.key_pair
        self.me = attacker.identity.peer_id.to_base58()
        self._seq = 0

    async def _publish(self, report: AttackReport, topic: str, data: bytes) -> None:
        report.attempts += 1
        try:
            await self.gossip.pubsub.publish(topic, data)
            report.bytes_delivered += len(data)
        except Exception as exc:  # noqa: BLE001 - the victim hung up on us: counted
            report.failed(exc)
        await trio.lowlevel.checkpoint()

    async def announcement_flood(
        self, run_id: str, *, round_: int, seconds: float = 5.0, rate: float = 200.0
    ) -> AttackReport:
        """Updates of a gigabyte each, announced for the round the run is in: a victim that
        pulled on a stranger's say would start downloads of them."""
        report = AttackReport("announcement flood")
        topic = update_topic(run_id)
        with trio.move_on_after(seconds):
            while True:
                ann = UpdateAnnouncement(sender=self.me, nbytes=1 << 30, checksum=os.urandom(32))
                env = seal(self.key, domain=DOMAIN, run=run_id, round=round_, payload=encode(ann))
                await self._publish(report, topic, env.to_bytes())
                await trio.sleep(1 / rate)
        return report

    async def stamp_forgeries(
        self, run_id: str, victim: str, *, seconds: float = 5.0, rate: float = 200.0
    ) -> AttackReport:
        """Membership deltas stamped in the future (just inside the drift window, and far
        beyond it), and ones writing the victim's own slot (a forged write)."""
        report = AttackReport("forged and future-dated stamps")
        topic = topic_for(run_id)
        with trio.move_on_after(seconds):
            while True:
                for owner, ahead in ((self.me, FUTURE_MS[0]), (self.me, FUTURE_MS[1]), (victim, 0)):
                    self._seq += 1
                    doc = _membership(owner, self.me, int(time.time() * 1000) + ahead)
                    delta = seal_delta(self.key, self.me, run_id=run_id, seq=self._seq, doc=doc)
                    await self._publish(report, topic, delta.raw)
                await trio.sleep(3 / rate)
        return report


def _membership(owner: str, writer: str, wall_ms: int) -> RunDoc:
    members = LWWMap(PEER, MEMBER)
    info = MemberInfo(
        role="trainer", addrs=("/ip4/1.2.3.4/tcp/1",), throughput=1.0,
        lease_expiry_ms=wall_ms + 60_000,
    )  # fmt: skip
    members.set(owner, info, Stamp(wall_ms, 0, writer))
    return RunDoc.of(members=members)


@contextlib.asynccontextmanager
async def gossip_attacker(
    attacker: Attacker, run_id: str, *, settle: float = 2.0
) -> AsyncIterator[GossipForger]:
    """A gossipsub router on the attacker's host, subscribed to the run's topics (so the
    victim grafts it into its mesh), `settle` s after which publishing begins."""
    gossip = Gossip(attacker.host, PeerScoreboard())
    async with trio.open_nursery() as nursery:
        await nursery.start(gossip.run)
        for topic in (update_topic(run_id), topic_for(run_id)):
            await gossip.subscribe(topic)
        await trio.sleep(settle)
        yield GossipForger(attacker, gossip)
        nursery.cancel_scope.cancel()
