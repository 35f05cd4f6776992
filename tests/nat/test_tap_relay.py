"""A member's link through the user-space relay (testing/tap_relay.py) shapes what the member
sends as netem would: the delay and its jitter, the loss, nothing else; unshaped it passes.

Measured with UDP datagrams echoed by the other member: a round trip is the shaped member's
delay (its echo comes back on an unshaped link), the loss is the share of datagrams that never
come back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from peertrain.testing.netns_lan import Lan, why_unavailable
from peertrain.testing.tap_relay import why_unavailable as why_no_tap

pytestmark = [pytest.mark.netns]

ECHO = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5002))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(data, peer)
"""

PROBE = """
import json, socket, sys, time
host, count, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(wait)
rtts = []
for i in range(count):
    sent = time.monotonic()
    s.sendto(i.to_bytes(4, "big"), (host, 5002))
    try:
        while int.from_bytes(s.recv(64), "big") != i:
            pass
        rtts.append((time.monotonic() - sent) * 1000)
    except TimeoutError:
        pass
print(json.dumps(rtts))
"""


@pytest.fixture
def lan():
    reason = why_unavailable() or why_no_tap()
    if reason:
        pytest.skip(reason)
    with Lan(2, prefix=f"pttap{time.monotonic_ns() % 10000}-", relayed={1}) as lan:
        echo = subprocess.Popen(lan.exec_argv(0, [sys.executable, "-c", ECHO]))
        try:
            time.sleep(0.3)
            yield lan
        finally:
            echo.kill()
            echo.wait()


def probe(lan: Lan, count: int, wait: float = 0.5) -> list[float]:
    """Round trips in ms of `count` datagrams, one at a time (a lost one waited `wait` s)."""
    argv = [sys.executable, "-c", PROBE, lan.ip(0), str(count), str(wait)]
    done = subprocess.run(lan.exec_argv(1, argv), capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


def test_an_unshaped_relayed_link_passes_every_datagram_at_once(lan):
    rtts = probe(lan, 50)
    assert len(rtts) == 50
    assert sorted(rtts)[25] < 20


def test_a_shaped_link_delays_what_its_member_sends_by_the_delay_and_its_jitter(lan):
    lan.shape(1, loss_pct=0, delay_ms=80, jitter_ms=20)
    rtts = probe(lan, 40)
    assert len(rtts) == 40
    assert min(rtts) >= 60 - 1 and sorted(rtts)[20] < 80 + 20 + 30, rtts
    assert max(rtts) - min(rtts) > 5, "no jitter at all"
    lan.unshape(1)
    assert sorted(probe(lan, 20))[10] < 20


def test_a_lossy_link_loses_about_its_share_of_what_its_member_sends(lan):
    lan.shape(1, loss_pct=30, delay_ms=0, jitter_ms=0)
    lost = 400 - len(probe(lan, 400, wait=0.05))
    # binomial(400, 0.3): mean 120, sd 9.2; five sd either side (and a few more: a lost ARP
    # request costs the datagrams behind it their 50 ms)
    assert 74 <= lost <= 180, lost
    assert 74 <= lan.relays[1].dropped <= 180
