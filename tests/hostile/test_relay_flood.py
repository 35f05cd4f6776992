"""A stranger cannot fill a public node's relay: reservations are only for the peer asking,
live while it is connected, and circuits and relayed bandwidth are bounded in total."""

from __future__ import annotations

import trio
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from peertrain.node.api.control import call
from peertrain.node.nat.relays import HopLimits, PacedRelay
from peertrain.node.net.budget import BudgetLimits, ResourceBudget
from peertrain.testing import open_test_swarm, wait_until
from peertrain.testing.attacks import Attacker, AttackReport

TABLE = 8  # the victim's relay_reservations


async def test_a_reservation_flood_leaves_room_for_an_honest_peer():
    async with open_test_swarm(3, first={"relay_reservations": TABLE}) as nodes:
        victim = nodes[0]
        await wait_until(lambda: victim.status()["reachability"]["relay_service"], timeout=30)
        addr = str(victim.addrs()[0])
        async with Attacker.open(seed=1) as attacker:
            victim_id = await attacker.connect(addr)
            forged = await attacker.relay_reservation_flood(victim_id, reservations=3 * TABLE)
            churn = await attacker.relay_reservation_churn(addr, identities=TABLE + 4)
        assert forged.attempts == 3 * TABLE and forged.granted == 0  # upstream: TABLE granted
        assert churn.granted == TABLE + 4  # departed holders free their place
        async with Attacker.open(seed=2) as honest:  # a NATed peer asking in earnest
            await honest.connect(addr)
            stream = await honest.host.new_stream(victim_id, [HOP])
            report = AttackReport("honest reservation")
            await honest._reserve(report, stream, HopMessage(type=HopMessage.RESERVE))
            assert report.granted == 1
            victim.budget.limits = BudgetLimits(relay_circuits=0)  # the relay is full
            target = nodes[1].host.get_id().to_bytes()
            circuit = HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=target))
            await honest._reserve(report, stream, circuit)
            assert report.granted == 1 and victim.budget.refused["relay_circuits"] == 1
        status = await call(victim.config.control_socket, "status", timeout=5)
        assert status["budget"]["refused"]["relay_forged_reservation"] == 3 * TABLE
        for node in nodes[1:]:
            assert victim.scoreboard.score(node.status()["peer_id"]) == 0


async def test_relayed_bytes_are_paced_by_the_budget_in_total():
    budget = ResourceBudget(BudgetLimits(relay_bandwidth=1_000_000))
    async with open_test_swarm(1) as (node,):
        relay = PacedRelay(node.host, limits=HopLimits(bandwidth=0), budget=budget)
        now = trio.current_time()
        # four circuits' streams reading 250 kB each: 1 MB in all takes the whole second
        dues = [relay._due(object(), 250_000) for _ in range(4)]  # type: ignore[arg-type]
        assert dues[-1] - now >= 0.99
        per_stream = PacedRelay(node.host, limits=HopLimits(bandwidth=0))
        assert per_stream._due(object(), 250_000) - now < 0.5  # type: ignore[arg-type]
