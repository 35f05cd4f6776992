"""16 MiB payloads across the NAT matrix: directly where a side is reachable, else via a relay."""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.slow]
PORT = 4700
MiB16 = 16 << 20


def start(world, stack: ExitStack, name: str, *args: str):
    role = world.Role(name, list(args))
    stack.callback(role.stop)
    return role


def test_payloads_direct_and_through_a_relay(nat_world):
    world = nat_world
    with ExitStack() as stack:
        relay = start(world, stack, "pub", "relay", "--listen", f"/ip4/10.213.0.10/tcp/{PORT}")
        relay_addr = relay.line("addr")["addr"]
        public_sink = start(
            world, stack, "pub2", "sink", "--listen", f"/ip4/10.213.0.11/tcp/{PORT}"
        )
        public_addr = public_sink.line("addr")["addr"]
        fwd = start(
            world, stack, "fwd", "sink", "--listen", f"/ip4/192.168.23.2/tcp/{world.FORWARDED_PORT}"
        )
        fwd_id = fwd.line("addr")["addr"].rsplit("/p2p/", 1)[1]
        circuits = {}
        for name in ("cone", "sym"):
            sink = start(
                world,
                stack,
                name,
                "sink",
                "--listen",
                f"/ip4/{world.ip_of(name)}/tcp/{PORT}",
                "--relay",
                relay_addr,
            )
            reserved = sink.line("circuit")
            assert reserved["circuit"].endswith("/p2p-circuit") or "p2p-circuit" in reserved["circuit"]  # timing: benchmarks/nat.py
            circuits[name] = reserved["circuit"]

        # a NATed node reaches a public one directly
        direct = world.send("cone", public_addr)
        assert direct["relayed"] is False
        # the forwarded port makes a NATed node directly reachable from outside
        forwarded = world.send(
            "cone2", f"/ip4/{world.WAN['fwd']}/tcp/{world.FORWARDED_PORT}/p2p/{fwd_id}"
        )
        assert forwarded["relayed"] is False
        # NATed to NATed: through the relay, whatever the NATs
        for src, dst in (("cone2", "cone"), ("sym2", "cone"), ("sym2", "sym"), ("cone", "sym")):
            relayed = world.send(src, circuits[dst])
            assert relayed["relayed"] is True, (src, dst, relayed)
            assert relayed["seconds"] > 0


def test_hole_punching_makes_cone_to_cone_direct(nat_world):
    world = nat_world
    with ExitStack() as stack:
        relay = start(world, stack, "pub", "relay", "--listen", f"/ip4/10.213.0.10/tcp/{PORT + 1}")
        relay_addr = relay.line("addr")["addr"]
        sink = start(
            world,
            stack,
            "cone",
            "sink",
            "--listen",
            f"/ip4/192.168.21.2/tcp/{PORT + 1}",
            "--relay",
            relay_addr,
        )
        circuit = sink.line("circuit")["circuit"]
        punched = world.send("cone2", circuit, punch=10, port=PORT + 2)
        assert punched["relayed"] is False, punched  # the payload went over the punched connection
        assert punched["punch_s"] < 10


def test_a_relay_that_dies_is_replaced_within_30_s(nat_world):
    world = nat_world
    with ExitStack() as stack:
        spots = [("pub", PORT + 3), ("pub2", PORT + 3), ("pub", PORT + 4)]
        relays = [
            start(world, stack, ns, "relay", "--listen", f"/ip4/{world.ip_of(ns)}/tcp/{port}")
            for ns, port in spots
        ]
        addrs = [relay.line("addr")["addr"] for relay in relays]
        sink = start(
            world,
            stack,
            "sym",
            "sink",
            "--listen",
            f"/ip4/192.168.22.2/tcp/{PORT + 3}",
            "--reservations",
            "2",
            *[a for addr in addrs for a in ("--relay", addr)],
        )
        held = {sink.line("circuit")["relay"], sink.line("circuit")["relay"]}
        assert held == set(addrs[:2])

        relays[0].stop()
        stopped = time.monotonic()
        assert sink.line("lost")["lost"] == addrs[0]
        replacement = sink.line("circuit", timeout=30)
        assert replacement["relay"] == addrs[2]
        replaced_after = time.monotonic() - stopped
        print(f"relay replaced after {replaced_after:.2f} s")
        assert replaced_after < 30

        delivered = world.send("cone", replacement["circuit"])
        assert delivered["relayed"] is True
