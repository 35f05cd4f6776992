"""Protocol IDs: format/parse round trip, strict parsing, the same-major compatibility rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peertrain.protocol.errors import DecodeError, ProtocolError, VersionMismatch
from peertrain.protocol.ids import (
    dial_order,
    negotiate,
    parse_protocol_id,
    protocol_id,
    require_compatible,
)


def test_format_and_parse_round_trip():
    pid = protocol_id("crdt/sync", "1.12.3")
    assert str(pid) == "/peertrain/crdt/sync/1.12.3"
    assert parse_protocol_id(str(pid)) == pid


@pytest.mark.parametrize(
    "text",
    [
        "/ipfs/kad/1.0.0",
        "/peertrain/crdt/1.0",
        "/peertrain/crdt/01.0.0",
        "/peertrain/Crdt/1.0.0",
        "/peertrain//1.0.0",
        "/peertrain/crdt/1.0.0/",
        "/peertrain/crdt/1.0.-1",
        "/peertrain/" + "a" * 200 + "/1.0.0",
    ],
)
def test_malformed_ids_are_decode_errors(text):
    with pytest.raises(DecodeError):
        parse_protocol_id(text)


def test_invalid_names_are_our_bugs_not_decode_errors():
    with pytest.raises(ValueError):
        protocol_id("Bad Name", "1.0.0")


def test_negotiate_prefers_the_highest_exact_match():
    ours = ["/peertrain/x/1.0.0", "/peertrain/x/1.2.0", "/peertrain/x/2.0.0"]
    theirs = ["/peertrain/x/1.2.0", "/peertrain/x/1.0.0"]
    assert str(negotiate(ours, theirs)) == "/peertrain/x/1.2.0"


def test_negotiate_falls_back_to_the_lower_compatible_version():
    assert str(negotiate(["/peertrain/x/1.4.0"], ["/peertrain/x/1.2.7"])) == "/peertrain/x/1.2.7"


def test_incompatible_majors_raise_a_clear_mismatch():
    with pytest.raises(VersionMismatch, match=r"we speak /peertrain/x/2\.0\.0.*upgraded"):
        negotiate(["/peertrain/x/2.0.0"], ["/peertrain/x/1.9.9"])
    with pytest.raises(VersionMismatch, match="major version 3 cannot talk to 2"):
        require_compatible(protocol_id("x", "2.1.0"), "/peertrain/x/3.0.0")
    with pytest.raises(VersionMismatch, match="a different protocol"):
        require_compatible(protocol_id("x", "2.1.0"), "/peertrain/y/2.1.0")
    assert require_compatible(protocol_id("x", "2.1.0"), "/peertrain/x/2.0.5").version.minor == 0


def test_dial_order_offers_the_newest_first():
    order = dial_order(["/peertrain/x/1.0.0", "/peertrain/x/1.10.0", "/peertrain/x/1.9.0"])
    assert [str(p.version) for p in order] == ["1.10.0", "1.9.0", "1.0.0"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.from_regex(r"/peertrain/[a-z/-]{0,20}/[0-9.]{0,12}"))
def test_random_ids_raise_only_protocol_errors(text):
    try:
        pid = parse_protocol_id(text)
    except ProtocolError:
        return
    assert str(pid) == text
