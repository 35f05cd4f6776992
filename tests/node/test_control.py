"""The control API: owner-only Unix socket, bounded requests, clear errors, one daemon per home."""

from __future__ import annotations

import json
import stat

import pytest
import trio
from peertrain.node.api.control import MAX_REQUEST, ControlServer, call
from peertrain.node.errors import ControlError


async def echo(params):
    return {"echo": params}


@pytest.fixture
async def server(tmp_path, nursery):
    path = tmp_path / "control.sock"
    await nursery.start(ControlServer(path, {"echo": echo}).run)
    return path


async def test_calls_are_answered(server):
    assert await call(server, "echo", {"x": 1}) == {"echo": {"x": 1}}


async def test_the_socket_is_owner_only(server):
    assert stat.S_IMODE(server.stat().st_mode) & 0o077 == 0


async def test_unknown_methods_are_refused_by_name(server):
    with pytest.raises(ControlError, match="unknown method 'nope'"):
        await call(server, "nope")


async def test_oversized_and_malformed_requests_get_errors_and_the_server_goes_on(server):
    for payload in (b"x" * (MAX_REQUEST + 10) + b"\n", b"[1, 2]\n", b"{not json\n"):
        stream = await trio.open_unix_socket(str(server))
        async with stream:
            await stream.send_all(payload)
            reply = json.loads(await stream.receive_some(65536))
        assert "error" in reply
    assert await call(server, "echo") == {"echo": {}}


async def test_a_second_daemon_on_the_same_home_is_refused(server, nursery):
    with pytest.raises(ControlError, match="already running"):
        await nursery.start(ControlServer(server, {}).run)


async def test_no_daemon_gives_a_clear_message(tmp_path):
    with pytest.raises(ControlError, match="no daemon is running"):
        await call(tmp_path / "control.sock", "status")
