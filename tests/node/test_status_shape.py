"""The typed parts of `peertrain status --json`: each TypedDict names what the JSON holds."""

from __future__ import annotations

from dataclasses import fields
from typing import get_type_hints

from peertrain.node.api.control import call
from peertrain.node.nat.hole_punch import PunchResult
from peertrain.node.nat.relays import Reservation
from peertrain.node.nat.traversal import NatStatus
from peertrain.node.services.dht import DhtServiceStatus
from peertrain.testing import open_test_swarm, wait_until


async def test_dht_and_nat_status_have_the_keys_their_types_name():
    async with open_test_swarm(2) as (a, b):
        await wait_until(lambda: len(a.status()["peers"]) == 1)
        status = await call(a.config.control_socket, "status")
        assert set(status["dht"]) == set(get_type_hints(DhtServiceStatus))
        verdict_keys = set(a.reachability.current.as_dict())  # merged in by the daemon
        assert set(status["reachability"]) == verdict_keys | set(get_type_hints(NatStatus))
        assert status["reachability"]["connections"] == {b.status()["peer_id"]: "direct"}


def test_a_reservation_and_a_punch_show_under_their_json_names():
    held = Reservation(
        relay="12D3KooWrelay",
        relay_addr="/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWrelay",
        circuit="/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWrelay/p2p-circuit/p2p/12D3KooWus",
        reserve_ms=7.5,
        since=1.0,
    )
    assert held.as_dict() == {
        "relay": held.relay,
        "addr": held.relay_addr,
        "circuit": held.circuit,
        "reserve_ms": 7.5,
        "since": 1.0,
    }
    punch = PunchResult(peer="12D3KooWpeer", direct=True, punch_s=0.9, redials=0, at=2.0)
    assert punch.as_dict() == {f.name: getattr(punch, f.name) for f in fields(PunchResult)}
