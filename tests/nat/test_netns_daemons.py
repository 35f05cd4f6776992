"""Real `peertrain node start` daemons in the namespaces: NATed nodes reach the public node."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager

import pytest
from peertrain.testing import wait_until_sync

pytestmark = [pytest.mark.netns, pytest.mark.slow]


@contextmanager
def daemons_in(world, base, specs):
    """specs: [(namespace name, bootstrap addrs or a callable of earlier statuses)]."""
    started = []
    try:
        statuses = []
        for name, bootstrap in specs:
            boot = bootstrap(statuses) if callable(bootstrap) else bootstrap
            daemon = world.NamespacedDaemon(
                name, base / name, world.daemon_args(name, bootstrap=boot)
            )
            started.append(daemon.start())
            statuses.append(daemon.wait_ready(timeout=30))
        yield started, statuses
    finally:
        for daemon in started:
            daemon.send_signal()
        for daemon in started:
            daemon.stop()


def test_nated_daemons_connect_to_the_public_node(nat_world, tmp_path):
    first = lambda statuses: [statuses[0]["share"]]  # noqa: E731
    specs = [("pub", []), ("cone", first), ("sym", first), ("fwd", first)]
    with daemons_in(nat_world, tmp_path, specs) as (daemons, statuses):
        public = statuses[0]
        assert public["share"].startswith("/ip4/10.213.0.10/tcp/4001/p2p/")
        for daemon in daemons[1:]:
            wait_until_sync(lambda d=daemon: public["peer_id"] in d.status()["peers"], timeout=20)
        seen_by_public = wait_until_sync(
            lambda: len(daemons[0].status()["peers"]) >= 3 and daemons[0].status()["peers"],
            timeout=20,
        )
        assert {s["peer_id"] for s in statuses[1:]} <= set(seen_by_public)


def test_daemons_report_their_reachability(nat_world, tmp_path):
    # two public daemons serve the dial-back; every node bootstraps from both
    both = lambda statuses: [s["share"] for s in statuses[:2]]  # noqa: E731
    specs = [
        ("pub", []),
        ("pub2", lambda statuses: [statuses[0]["share"]]),
        ("cone", both),
        ("sym", both),
        ("fwd", both),
    ]
    with daemons_in(nat_world, tmp_path, specs) as (daemons, _):

        def verdict(daemon):
            return wait_until_sync(
                lambda: (r := daemon.status()["reachability"])["status"] != "unknown" and r,
                timeout=40,
                interval=0.1,
            )

        by_name = {d.name: verdict(d) for d in daemons}
        assert by_name["pub"]["status"] == "public"
        assert by_name["pub"]["addrs"] == ["/ip4/10.213.0.10/tcp/4001"]
        assert by_name["pub2"]["status"] == "public"
        for name in ("cone", "sym"):
            assert by_name[name]["status"] == "private", by_name[name]
            # "behind NAT: peers see you as …", or "behind NAT (peers see you as …): reachable
            # through relays …" once it holds reservations (test_netns_matrix.py)
            assert by_name[name]["text"].startswith("behind NAT"), by_name[name]
            assert f"peers see you as {nat_world.WAN[name]}" in by_name[name]["text"]
        cone = next(d for d in daemons if d.name == "cone")
        shown = subprocess.run(
            [sys.executable, "-m", "peertrain", "status", "--home", str(cone.home)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "  reachable    behind NAT" in shown
        assert f"peers see you as {nat_world.WAN['cone']}" in shown
        assert by_name["fwd"]["status"] == "public"
        assert by_name["fwd"]["addrs"] == ["/ip4/10.213.0.23/tcp/4001"]
        assert by_name["fwd"]["text"].startswith(
            "reachable directly at /ip4/10.213.0.23/tcp/4001/p2p/"
        )
