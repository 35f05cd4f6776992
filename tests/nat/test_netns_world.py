"""scripts/netns-nat itself: idempotent, the three NAT kinds behave as named, clean skips."""

from __future__ import annotations

import subprocess
import sys

import pytest

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); print("ready", flush=True)
s.settimeout(10)
c, addr = s.accept(); print(f"{addr[0]}:{addr[1]}", flush=True)
"""
CLIENT = """
import socket, sys
c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
c.bind(("0.0.0.0", int(sys.argv[3]))); c.settimeout(2)
try:
    c.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except socket.timeout:
    print("timeout")
except OSError as e:
    print(f"error {e.errno}")
"""


def seen_source(world, client_ns: str, port: int) -> str:
    """Where the public node sees a connection from `client_ns` bound to source `port`."""
    server = subprocess.Popen(
        world.in_ns("pub", [sys.executable, "-c", SERVER, "10.213.0.10", "5999"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        dial(world, client_ns, "10.213.0.10", 5999, port)
        return server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()


def dial(world, ns: str, ip: str, port: int, source_port: int) -> str:
    argv = world.in_ns(ns, [sys.executable, "-c", CLIENT, ip, str(port), str(source_port)])
    return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()


@pytest.mark.netns
def test_setup_is_idempotent_and_nats_behave_as_named(nat_world):
    world = nat_world
    world.setup()  # a second time: must change nothing and not fail
    assert world.exists()

    assert seen_source(world, "cone", 41000) == "10.213.0.21:41000"  # port kept
    ip, port = seen_source(world, "sym", 41000).split(":")
    assert ip == "10.213.0.22" and port != "41000"  # fully random port
    # unsolicited inbound: dropped silently by a NAT (the forwarded port: test_netns_payload)
    assert dial(world, "pub", world.WAN["cone"], 41000, 41001) == "timeout"
    assert dial(world, "pub", "192.168.21.2", 41000, 41001).startswith("error")  # no route


def test_the_skip_reason_names_root(monkeypatch):
    from peertrain.testing import netns

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "need root" in netns.why_unavailable()
