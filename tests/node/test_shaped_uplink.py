"""A daemon's shaped uplink (hidden `--uplink-mbit`, research/testing): everything its host sends
leaves at the rate asked for, and a host without it is not slowed."""

from __future__ import annotations

import random

import trio
from peertrain.node.net.host import build_host
from peertrain.node.net.identity import Identity
from peertrain.protocol.framing import read_exactly_into
from peertrain.testing.loopback_hosts import connected_pair, our_host

SINK = "/peertrain/test-uplink/1.0.0"


async def _send_seconds(sender, payload: bytes) -> float:
    got = bytearray(len(payload))
    done = trio.Event()

    async def sink(stream) -> None:
        await read_exactly_into(stream, memoryview(got))
        done.set()

    async with connected_pair(our_host(), sender) as (listener, dialer):
        listener.set_stream_handler(SINK, sink)
        stream = await dialer.new_stream(listener.get_id(), [SINK])
        started = trio.current_time()
        await stream.write(payload)
        with trio.fail_after(30):
            await done.wait()
        took = trio.current_time() - started
    assert got == payload
    return took


async def test_a_shaped_host_sends_at_its_uplink_rate():
    payload = random.Random(1).randbytes(1_000_000)  # 8 Mbit: 1 s at 8 Mbit/s
    shaped = await _send_seconds(build_host(Identity.generate(), uplink_mbit=8.0), payload)
    assert 0.9 < shaped < 5.0, shaped
    plain = await _send_seconds(our_host(), payload)
    assert plain < shaped / 3, (plain, shaped)
