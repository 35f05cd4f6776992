"""One convention for every request/response protocol (node/net/rpc.py `serve_one`): RPC
servers, the pipeline and dial-back read, penalise, answer and refuse alike. In-memory streams."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from peertrain.node.net.penalties import PeerScoreboard
from peertrain.node.net.rpc import BAD_MESSAGE_PENALTY, Answer, serve_one
from peertrain.node.services.peer_exchange import PeersRequest, PeersResponse
from peertrain.protocol.framing import HEADER, read_message, write_message
from peertrain.protocol.messages import ErrorCode, ErrorResponse
from peertrain.testing.byte_streams import TrioByteStream


async def _serve(sent: bytes, handle, board: PeerScoreboard) -> TrioByteStream:
    """What the server end answers to `sent` (the client's end, to read from)."""
    client, end = trio.testing.memory_stream_pair()
    await client.send_all(sent)
    await client.send_eof()
    await serve_one(
        TrioByteStream(end),
        "peer-a",
        PeersRequest,
        handle,
        scoreboard=board,
        idle_timeout=1.0,
        label="/test/1",
    )
    await end.aclose()
    return TrioByteStream(client)


async def _request_bytes() -> bytes:
    sink, source = trio.testing.memory_stream_pair()
    await write_message(TrioByteStream(sink), PeersRequest(request_id=7, limit=4), idle_timeout=1)
    await sink.send_eof()
    out = b""
    while chunk := await source.receive_some():
        out += chunk
    return out


async def test_garbage_is_penalised_and_not_answered():
    board = PeerScoreboard()
    client = await _serve(HEADER.pack(5) + b"\xff" * 5, None, board)
    assert await client.read(100) == b""
    assert board.score("peer-a") == pytest.approx(BAD_MESSAGE_PENALTY, abs=0.01)  # it decays


async def test_a_handler_that_fails_on_our_bug_answers_internal_and_blames_nobody():
    async def broken(request):
        raise KeyError("ours")

    board = PeerScoreboard()
    client = await _serve(await _request_bytes(), broken, board)
    reply = await read_message(client, (PeersResponse, ErrorResponse), idle_timeout=1)
    assert isinstance(reply, ErrorResponse) and reply.code == ErrorCode.INTERNAL
    assert reply.request_id == 7 and board.score("peer-a") == 0


async def test_an_answer_is_sent_then_what_follows_it():
    async def with_payload(request):
        async def then() -> None:
            await stream_end.write(b"payload")

        return Answer(request.reply(PeersResponse, peers=()), then)

    client, end = trio.testing.memory_stream_pair()
    stream_end = TrioByteStream(end)
    await client.send_all(await _request_bytes())
    await client.send_eof()
    await serve_one(
        stream_end,
        "peer-a",
        PeersRequest,
        with_payload,
        scoreboard=PeerScoreboard(),
        idle_timeout=1.0,
        label="/test/1",
    )
    await end.aclose()
    stream = TrioByteStream(client)
    reply = await read_message(stream, PeersResponse, idle_timeout=1)
    assert reply.request_id == 7 and await stream.read(100) == b"payload"
