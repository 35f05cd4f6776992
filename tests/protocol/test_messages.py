"""Message codec: conformance of every protocol message type, strict field checks, requests."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peertrain.protocol.conformance import check_message_type
from peertrain.protocol.errors import DecodeError, MessageTooLarge, ProtocolError, RemoteError
from peertrain.protocol.messages import (
    ErrorCode,
    ErrorResponse,
    Message,
    Ping,
    Pong,
    Request,
    Response,
    check_reply,
    decode,
    encode,
    message,
    registered_messages,
)
from peertrain.protocol.packing import pack
from peertrain.protocol.schema import IntRange, MaxLen
from peertrain.protocol.tensor_transfer import (
    TensorHeaderReply,
    TensorHeaderRequest,
    TensorRangeReply,
    TensorRangeRequest,
)
from peertrain.protocol.tensors import TensorHeader


class Role(enum.StrEnum):
    STAGE = "stage"
    GROUP = "group"


@message("test/peer-info", max_size=256)
class PeerInfo(Message):
    peer: Annotated[bytes, MaxLen(40)]
    role: Role
    throughput: float


@message("test/announce", max_size=1024)
class Announce(Request):
    run: Annotated[str, MaxLen(32)]
    stage: Annotated[int, IntRange(0, 63)]
    peers: Annotated[tuple[PeerInfo, ...], MaxLen(4)] = ()
    tags: dict[str, int] = dataclasses.field(default_factory=dict)
    note: str | None = None
    ok: bool = True


ANNOUNCE = Announce(
    request_id=7,
    run="run-1",
    stage=3,
    peers=(PeerInfo(peer=b"p" * 38, role=Role.STAGE, throughput=12.5),),
    note="hello",
)


@message("test/announced", max_size=64)
class Announced(Response):
    accepted: bool


def _examples() -> dict[type[Message], Message]:
    header = TensorHeader(
        name="layer.0.weight",
        dtype="float32",
        shape=(4, 8),
        codec="int8",
        block_size=64,
        nbytes=36,
        chunk_size=1 << 22,
        chunk_digests=b"d" * 32,
        checksum=b"c" * 32,
    )
    return {
        TensorHeader: header,
        TensorHeaderRequest: TensorHeaderRequest(request_id=3, checksum=b"c" * 32),
        TensorHeaderReply: TensorHeaderReply(request_id=3, header=header),
        TensorRangeRequest: TensorRangeRequest(
            request_id=4, checksum=b"c" * 32, first_chunk=2, count=5
        ),
        TensorRangeReply: TensorRangeReply(request_id=4, first_chunk=2, count=5),
        Ping: Ping(request_id=1),
        Pong: Pong(request_id=1),
        ErrorResponse: ErrorResponse(request_id=2**64 - 1, code=ErrorCode.BUSY, reason="later"),
        PeerInfo: ANNOUNCE.peers[0],
        Announce: ANNOUNCE,
        Announced: Announced(request_id=7, accepted=True),
    }


def test_every_protocol_message_type_has_an_example():
    ours = {
        cls
        for cls in registered_messages().values()
        if cls.__module__.startswith("peertrain.protocol")
    }
    assert ours <= set(_examples()), f"add examples for {ours - set(_examples())}"


@pytest.mark.parametrize(
    "cls, example", list(_examples().items()), ids=lambda x: getattr(x, "__name__", "")
)
def test_message_type_conformance(cls, example):
    check_message_type(cls, example)


def test_strict_field_types():
    good = {"request_id": 1, "run": "r", "stage": 1}
    decode(pack(["test/announce", good]), Announce)
    for bad in [
        {"stage": True},  # a bool is not an int
        {"stage": 1.0},
        {"stage": 64},  # IntRange
        {"run": b"r"},
        {"run": "r" * 33},  # MaxLen
        {"peers": [{"peer": b"x", "role": "boss", "throughput": 1.0}]},  # unknown enum value
        {"peers": [{"peer": b"x", "role": "stage", "throughput": float("nan")}]},
        {"peers": [{"peer": b"x", "role": "stage", "throughput": 1.0}] * 5},  # MaxLen on tuple
        {"tags": {"a": "1"}},
        {"request_id": -1},
        {"ok": 1},
    ]:
        with pytest.raises(DecodeError):
            decode(pack(["test/announce", good | bad]), Announce)


def test_unknown_fields_are_ignored_and_defaults_fill_missing_ones():
    raw = pack(["test/announce", {"request_id": 1, "run": "r", "stage": 1, "added_in_1_1": 5}])
    assert decode(raw, Announce) == Announce(request_id=1, run="r", stage=1)


def test_encode_refuses_our_own_mistakes():
    with pytest.raises(TypeError, match="stage"):
        encode(Announce(run="r", stage="3"))
    with pytest.raises(MessageTooLarge):
        encode(Announce(run="r", stage=1, tags={f"t{i}": i for i in range(300)}))


def test_requests_get_fresh_ids_and_replies_echo_them():
    ping = Ping()
    assert ping.request_id != Ping().request_id
    pong = decode(encode(ping.reply(Pong)), (Pong, ErrorResponse))
    assert check_reply(ping, pong) is pong
    with pytest.raises(DecodeError, match="echoes request id"):
        check_reply(Ping(), pong)
    refusal = ping.reply(ErrorResponse, code=ErrorCode.NOT_FOUND, reason="no such round")
    with pytest.raises(RemoteError, match="no such round") as info:
        check_reply(ping, decode(encode(refusal), (Pong, ErrorResponse)))
    assert info.value.code == ErrorCode.NOT_FOUND


def test_decode_accepts_only_the_expected_types():
    with pytest.raises(DecodeError, match="expected a message tagged"):
        decode(encode(Pong(request_id=1)), Ping)


def test_duplicate_tags_and_non_messages_are_refused():
    with pytest.raises(ValueError, match="already used"):
        message("core/ping", max_size=64)(type("Again", (Message,), {}))
    with pytest.raises(TypeError):
        message("test/plain", max_size=64)(type("Plain", (), {}))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200) | st.sampled_from([encode(m) for m in _examples().values()]))
def test_random_bytes_raise_only_protocol_errors(raw):
    try:
        decode(raw, tuple(_examples()))
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=5)
        | st.binary(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_random_structures_raise_only_protocol_errors(fields):
    try:
        decode(pack(["test/announce", fields]), Announce)
    except ProtocolError:
        pass
