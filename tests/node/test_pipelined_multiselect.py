"""Pipelined multistream-select: the dialer's header and first protocol travel in one write.

The listener is either py-libp2p's own `Multiselect` (what a stock peer runs) or a scripted peer
that answers only once it holds both lines, or answers wrongly. Both ends talk over connected
in-memory byte streams with libp2p's read/write interface.
"""

from __future__ import annotations

import pytest
import trio
from libp2p.protocol_muxer.exceptions import MultiselectClientError, ProtocolNotSupportedError
from libp2p.protocol_muxer.multiselect import Multiselect
from libp2p.protocol_muxer.multiselect_communicator import MultiselectCommunicator
from libp2p.utils import encode_delim
from peertrain.node.net.transport import PipelinedMultiselectClient
from peertrain.testing.byte_streams import byte_stream_pair
from peertrain.testing.loopback_hosts import connected_pair, our_host, stock_host

HEADER = encode_delim(b"/multistream/1.0.0")


async def select(protocols: list[str], listener) -> str:
    """Run the pipelined client against `listener(stream)` and return what it selected."""
    ours, theirs = byte_stream_pair()
    failure: MultiselectClientError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener, theirs)
        with trio.fail_after(5):
            try:
                chosen = await PipelinedMultiselectClient().select_one_of(
                    protocols, MultiselectCommunicator(ours), 5
                )
            except MultiselectClientError as exc:  # raised below, not as a nursery's group
                failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return chosen


def stock_listener(*supported: str):
    async def listen(stream) -> None:
        multiselect = Multiselect()
        for protocol in supported:
            multiselect.add_handler(protocol, None)
        await multiselect.negotiate(MultiselectCommunicator(stream), 5)
        await trio.sleep_forever()

    return listen


async def test_header_and_first_protocol_arrive_together_and_take_one_round_trip():
    async def answers_only_when_both_lines_are_there(stream) -> None:
        first = await stream.read(1024)  # nothing is answered before this one read
        assert first == HEADER + encode_delim(b"/a/1")
        await stream.write(HEADER + encode_delim(b"/a/1"))
        await trio.sleep_forever()

    assert await select(["/a/1"], answers_only_when_both_lines_are_there) == "/a/1"


async def test_a_refused_first_choice_falls_back_to_the_next_with_a_stock_listener():
    assert await select(["/a/1", "/b/1"], stock_listener("/b/1")) == "/b/1"
    assert await select(["/b/1", "/a/1"], stock_listener("/b/1", "/a/1")) == "/b/1"


async def test_nothing_in_common_is_protocol_not_supported():
    with pytest.raises(ProtocolNotSupportedError):
        await select(["/a/1", "/c/1"], stock_listener("/b/1"))


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (encode_delim(b"/multistream/2.0.0") + encode_delim(b"/a/1"), "mismatch"),
        (HEADER + encode_delim(b"/other/1"), "unrecognized response"),
        (HEADER[:5], "read failed"),  # then the peer hangs up
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "read failed"),  # a broken varint
    ],
    ids=["wrong-header", "wrong-answer", "hang-up", "garbage"],
)
async def test_a_wrong_or_broken_reply_is_a_clean_client_error(reply, match):
    async def misbehaves(stream) -> None:
        await stream.read(1024)
        await stream.write(reply)
        await stream.close()

    with pytest.raises(MultiselectClientError, match=match):
        await select(["/a/1"], misbehaves)


@pytest.mark.parametrize("ours_dials", [True, False], ids=["ours-dials-stock", "stock-dials-ours"])
async def test_hosts_negotiate_security_muxer_and_streams_with_a_stock_peer(ours_dials):
    served = trio.Event()

    async def handler(stream) -> None:
        assert await stream.read(5) == b"hello"
        served.set()

    ours, stock = our_host(), stock_host()
    dialer, listener = (ours, stock) if ours_dials else (stock, ours)
    async with connected_pair(listener, dialer):
        listener.set_stream_handler("/peertrain/test-b/1.0.0", handler)
        stream = await dialer.new_stream(
            listener.get_id(), ["/peertrain/test-a/1.0.0", "/peertrain/test-b/1.0.0"]
        )
        assert stream.get_protocol() == "/peertrain/test-b/1.0.0"
        await stream.write(b"hello")
        with trio.fail_after(10):
            await served.wait()
