"""`peertrain join <peer ID>` through the CLI: the DHT finds a peer from nothing but its ID.

Three daemons on loopback, as a user runs them: a bootstrap node, the owner of the ID (joined to
the bootstrap node), and a joiner given the owner's bare peer ID and the *bootstrap node's*
address only. Peer exchange (and the DHT's own bootstrap walk) would also mesh three nodes
within seconds, so a connection to the owner alone proves nothing: the joiner always asks the
DHT, and its status says how the DHT knew the owner ("record": the owner's signed peer record;
"lookup": a peer named it), with the addresses it found; its log says the same.
"""

from __future__ import annotations

import json

import pytest
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import peertrain_cli as peertrain

pytestmark = pytest.mark.slow


def status_json(daemon: DaemonProcess) -> dict:
    return json.loads(peertrain("status", "--home", str(daemon.home), "--json").stdout)


def test_a_daemon_joins_the_owner_of_a_bare_peer_id_found_through_the_dht(tmp_path):
    daemons: list[DaemonProcess] = []
    try:
        boot = DaemonProcess(tmp_path / "boot", node_args()).start()
        daemons.append(boot)
        boot_share = boot.wait_ready()["share"]
        owner = DaemonProcess(tmp_path / "owner", node_args(bootstrap=[boot_share])).start()
        daemons.append(owner)
        owner_id = owner.wait_ready()["peer_id"]
        wait_until_sync(lambda: owner.status()["dht"]["bootstrapped"], timeout=20)
        assert owner_id not in boot_share

        joiner = DaemonProcess(
            tmp_path / "joiner",
            [
                "join",
                owner_id,
                "--bootstrap",
                boot_share,
                "--listen",
                "/ip4/127.0.0.1/tcp/0",
                "--log-format",
                "json",
            ],
        ).start()
        daemons.append(joiner)
        joiner.wait_ready()
        wait_until_sync(lambda: owner_id in status_json(joiner)["peers"], timeout=20)

        status = status_json(joiner)
        assert owner_id in status["peers"]
        found = status["dht"]["resolved"][owner_id]
        assert found["how"] in ("record", "lookup"), (
            found
        )  # the DHT named it, not an open connection
        owner_port = owner.status()["share"].split("/tcp/")[1].split("/")[0]
        assert any(f"/tcp/{owner_port}" in addr for addr in found["addrs"]), found
        wait_until_sync(
            lambda: f"joined {owner_id} (found by {found['how']})" in joiner.log_path.read_text(),
            timeout=10,
        )
    finally:
        codes = stop_all(daemons)
    assert codes == [0] * len(daemons), [d.log_tail() for d in daemons]


def test_joining_by_peer_id_without_a_bootstrap_address_fails_clearly(tmp_path):
    peer_id = json.loads(peertrain("id", "--home", str(tmp_path / "other"), "--json").stdout)[
        "peer_id"
    ]
    result = peertrain("join", peer_id, "--home", str(tmp_path / "me"), check=False)
    assert (
        result.returncode == 1
        and "--bootstrap" in result.stderr
        and "Traceback" not in result.stderr
    )
    result = peertrain("join", "not-a-peer-id", "--home", str(tmp_path / "me"), check=False)
    assert result.returncode == 1 and "is neither a peer address" in result.stderr
