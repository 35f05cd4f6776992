"""Reachability verdicts behind real NATs: bare hosts in the namespaces of scripts/netns-nat."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns
NODE = str(Path(__file__).with_name("dialback_node.py"))


@contextmanager
def dialback_servers(world):
    procs = []
    try:
        addrs = []
        for name in ("pub", "pub2"):
            argv = world.in_ns(
                name, [sys.executable, NODE, "--listen", f"/ip4/{world.ip_of(name)}/tcp/4500"]
            )
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(proc)
            addrs.append(json.loads(proc.stdout.readline())["addr"])
        yield addrs
    finally:
        for proc in procs:
            proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def verdict_of(world, name: str, servers: list[str], port: int = 4001) -> dict:
    argv = world.in_ns(
        name,
        [
            sys.executable,
            NODE,
            "--listen",
            f"/ip4/{world.ip_of(name)}/tcp/{port}",
            *[a for s in servers for a in ("--ask", s)],
        ],
    )
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    verdicts = [line["verdict"] for line in lines if "verdict" in line]
    assert verdicts, f"no verdict from {name}:\n{out.stdout}\n{out.stderr[-2000:]}"
    return verdicts[0]


def test_verdicts_behind_each_kind_of_nat(nat_world):
    world = nat_world
    with dialback_servers(world) as servers:
        public = verdict_of(world, "pub", servers, port=4600)
        assert public["status"] == "public", public
        assert public["addrs"] == ["/ip4/10.213.0.10/tcp/4600"]

        for name in ("cone", "sym"):
            nated = verdict_of(world, name, servers)
            assert nated["status"] == "private", (name, nated)
            assert nated["observed_ips"] == [world.WAN[name]]
            assert nated["text"].startswith(f"behind NAT: peers see you as {world.WAN[name]}")

        forwarded = verdict_of(world, "fwd", servers, port=world.FORWARDED_PORT)
        assert forwarded["status"] == "public", forwarded
        assert forwarded["addrs"] == [f"/ip4/{world.WAN['fwd']}/tcp/{world.FORWARDED_PORT}"]
