"""End to end through the CLI, as a user runs it: real processes, separate homes, loopback."""

from __future__ import annotations

import json
import signal
import time

import pytest
from peertrain.node.cli.processes import DaemonProcess, node_args
from peertrain.testing import wait_until_sync
from peertrain.testing.processes import peertrain_cli as peertrain

pytestmark = pytest.mark.slow


def status_json(daemon: DaemonProcess) -> dict:
    return json.loads(peertrain("status", "--home", str(daemon.home), "--json").stdout)


@pytest.mark.serial
def test_three_daemons_joined_to_the_first_all_see_each_other_within_10s(daemons):
    with daemons(3) as nodes:
        ids = [d.status()["peer_id"] for d in nodes]
        start = time.monotonic()

        seen: dict[str, list[str]] = {}

        def meshed() -> bool:
            for i, d in enumerate(nodes):
                seen[ids[i]] = status_json(d)["peers"]
            # exactly the other two: a dial-back probe's throwaway identity is never listed
            # (test_dial_back_probes_never_show_among_the_clients_peers in tests/nat)
            return all(set(seen[me]) == set(ids) - {me} for me in ids)

        try:
            wait_until_sync(meshed, timeout=10)
        except TimeoutError:
            raise AssertionError(f"not meshed within 10 s: {ids=} {seen=}") from None
        assert time.monotonic() - start < 10
        status = status_json(nodes[2])
        assert status["run"] is None and status["name"] and status["addrs"]


def test_join_prints_the_address_to_give_others(tmp_path):
    first = DaemonProcess(tmp_path / "a", node_args()).start()
    try:
        share = first.wait_ready()["share"]
        joiner = DaemonProcess(
            tmp_path / "b", ["join", share, "--listen", "/ip4/127.0.0.1/tcp/0"]
        ).start()
        try:
            status = joiner.wait_ready()
            wait_until_sync(lambda: first.status()["peers"] == [status["peer_id"]], timeout=10)
        finally:
            assert joiner.stop() == 0
        banner = joiner.log_path.read_text()
        assert f"peer id       {status['peer_id']}" in banner and "give others   /ip4/" in banner
    finally:
        first.stop()


@pytest.mark.serial
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_daemon_within_5s_cleanly(tmp_path, signum):
    bootstrap = DaemonProcess(tmp_path / "boot", node_args()).start()
    try:
        node = DaemonProcess(
            tmp_path / "node", node_args(bootstrap=[bootstrap.wait_ready()["share"]])
        ).start()
        node.wait_ready()
        wait_until_sync(lambda: len(node.status()["peers"]) == 1, timeout=10)
        start = time.monotonic()
        node.send_signal(signum)
        code = node.process.wait(timeout=10)
        elapsed = time.monotonic() - start
        assert code == 0 and elapsed < 5, (code, elapsed)
        log = node.log_path.read_text()
        assert "Traceback" not in log and "stopped" in log
        records = [
            json.loads(line) for line in log.splitlines() if line.startswith("{")
        ]  # --log-format json
        assert any(r["msg"] == "stopped" for r in records)
        assert not node.control_socket.exists()
    finally:
        bootstrap.stop()


def test_node_stop_ends_the_daemon_of_its_home_and_waits_for_it(tmp_path):
    node = DaemonProcess(tmp_path / "node", node_args()).start()
    try:
        name = node.wait_ready()["name"]
        result = peertrain("node", "stop", "--home", str(tmp_path / "node"))
        assert result.returncode == 0 and f"stopped {name}" in result.stdout
        assert node.process.wait(timeout=5) == 0 and not node.control_socket.exists()
    finally:
        node.stop()
    again = peertrain("node", "stop", "--home", str(tmp_path / "node"), check=False)
    assert again.returncode != 0 and "no daemon is running" in again.stderr


def test_status_without_a_daemon_fails_clearly(tmp_path):
    result = peertrain("status", "--home", str(tmp_path), check=False)
    assert result.returncode != 0 and "no daemon is running" in result.stderr


def test_id_prints_peer_id_and_friendly_name(tmp_path):
    first = peertrain("id", "--home", str(tmp_path), "--json")
    again = peertrain("id", "--home", str(tmp_path))
    ident = json.loads(first.stdout)
    assert again.stdout.split() == [ident["peer_id"], ident["name"]]


def test_bad_config_is_reported_by_key(tmp_path):
    (tmp_path / "config.toml").write_text('lisen = ["/ip4/127.0.0.1/tcp/0"]\n')
    result = peertrain("node", "start", "--home", str(tmp_path), check=False)
    assert result.returncode == 1 and "unknown key `lisen`; did you mean `listen`" in result.stderr
    assert "Traceback" not in result.stderr
