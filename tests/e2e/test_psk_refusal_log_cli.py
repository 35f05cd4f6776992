"""A peer with another pre-shared key does not flood the receiver's log (issue 32, item 7): it
redials every few seconds, and each refusal was a warning (20 in 6 s); now one per remote host
per minute, the next one counting those skipped. The dialer tells its refusal once, and its
status says its bootstrap peer refuses its key. Real daemons, as `peertrain node start`."""

from __future__ import annotations

import time

import pytest
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing.processes import peertrain_cli

pytestmark = pytest.mark.slow  # two daemons, 12 s of redials

KEY_A, KEY_B = "a" * 64, "b" * 64


def test_a_psk_mismatch_is_one_warning_on_the_receiver_not_one_per_dial(tmp_path):
    receiver = DaemonProcess(tmp_path / "a", node_args(extra=["--psk", KEY_A]))
    daemons = [receiver.start()]
    try:
        share = receiver.wait_ready()["share"]
        dialer = DaemonProcess(tmp_path / "b", node_args(bootstrap=[share], extra=["--psk", KEY_B]))
        daemons.append(dialer.start())
        dialer.wait_ready()
        time.sleep(12)  # the dialer redials every reconnect_interval (2 s)
        dialer_log = dialer.log_path.read_text()
        status = peertrain_cli("status", "--home", str(dialer.home)).stdout
        refused = [
            line
            for line in receiver.log_path.read_text().splitlines()
            if "refused connection" in line
        ]
    finally:
        stop_all(daemons)
    assert "pre-shared key mismatch" in dialer_log  # the dialer did keep trying and was told why
    # each cause once: the DHT's dialer logged every failed dial of the same peer a second time
    told = [line for line in dialer_log.splitlines() if "could not connect" in line]
    assert not [line for line in told if "peertrain.dht" in line], "\n".join(told)
    assert sum("pre-shared key mismatch" in line for line in told) == 1, "\n".join(told)
    # status names the refusal, not "connect to more peers (--bootstrap)"
    assert "  bootstrap    could not connect to" in status and "pre-shared key mismatch" in status
    assert "--bootstrap" not in status
    assert len(refused) == 1, "\n".join(refused)
    assert "pre-shared key mismatch" in refused[0]
