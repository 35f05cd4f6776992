"""The daemon's resource budget: downloads, disk and connections are bounded where taken."""

from __future__ import annotations

import pytest
import trio
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr
from peertrain.node.net.budget import (
    BudgetExceeded,
    BudgetLimits,
    ConnectionGate,
    ResourceBudget,
    ip_prefix,
)
from peertrain.node.net.host import build_host, connect
from peertrain.node.net.identity import Identity
from peertrain.testing import wait_until


def test_receive_memory_is_bounded_in_total_and_per_peer():
    budget = ResourceBudget(BudgetLimits(receive_memory=100, receive_memory_per_peer=60))
    budget.reserve_memory("a", 60)
    with pytest.raises(BudgetExceeded, match="a would hold over 60"):
        budget.reserve_memory("a", 1)
    budget.reserve_memory("b", 40)
    with pytest.raises(BudgetExceeded, match="exceed the daemon's 100"):
        budget.reserve_memory("c", 1)
    budget.release_memory("a", 60)
    with budget.receive_memory("c", 50):
        assert budget.usage()["receive_memory"] == 90
    assert budget.usage()["receive_memory"] == 40
    assert budget.usage()["refused"] == {"receive_memory_per_peer": 1, "receive_memory": 1}


def test_disk_is_bounded_under_the_homes_runs(tmp_path):
    budget = ResourceBudget(BudgetLimits(disk=1000), home=tmp_path)
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "ckpt").write_bytes(b"x" * 900)
    budget.check_disk(100)
    with pytest.raises(BudgetExceeded, match="disk"):
        budget.check_disk(101)


def test_prefixes_group_a_block_one_party_controls():
    assert ip_prefix("203.0.113.7") == ip_prefix("203.0.113.200") == "203.0.113.0/24"
    assert ip_prefix("2001:db8:1:2::7") == "2001:db8:1::/48"


async def test_connections_over_the_limit_are_closed_on_arrival():
    hub = build_host(Identity.generate())
    budget = ResourceBudget(BudgetLimits(connections=2))
    gate = ConnectionGate(hub, budget)
    async with hub.run([Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        hub.get_network().register_notifee(gate)
        info = PeerInfo(hub.get_id(), hub.get_addrs())
        clients = [build_host(Identity.generate()) for _ in range(4)]
        async with trio.open_nursery() as nursery:
            for client in clients:
                await nursery.start(_run_and_connect, client, info)
            await wait_until(lambda: len(hub.get_connected_peers()) <= 2, timeout=5)
            await trio.sleep(0.3)  # and it stays there
            assert len(hub.get_connected_peers()) == 2
            assert budget.refused["connections"] == 2 and gate.counts()["total"] == 2
            nursery.cancel_scope.cancel()


async def _run_and_connect(client, info, *, task_status=trio.TASK_STATUS_IGNORED):
    async with client.run([]):
        try:
            await connect(client, info)
        except Exception:  # noqa: BLE001 - the hub may close us before the dial returns
            pass
        task_status.started()
        await trio.sleep_forever()
