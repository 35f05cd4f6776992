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


async def _raw(server, payload: bytes) -> dict:
    stream = await trio.open_unix_socket(str(server))
    async with stream:
        await stream.send_all(payload)
        return json.loads(await stream.receive_some(65536))


@pytest.mark.parametrize(
    "payload, says",
    [
        (b'{"method": "echo", "params": [1]}\n', "params must be a JSON object"),
        (b'{"method": [1]}\n', "unknown method"),
        (b'{"method": "echo", "params": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "nests deeper"),
        (b"[" * 30000 + b"\n", "nests deeper"),
    ],
)
async def test_requests_of_the_wrong_shape_are_refused_and_the_server_goes_on(
    server, payload, says
):
    reply = await _raw(server, payload)
    assert says in reply["error"]
    assert await call(server, "echo") == {"echo": {}}


async def test_a_method_that_fails_on_its_own_bug_answers_internal_error_and_the_server_goes_on(
    tmp_path, nursery, caplog
):
    async def broken(params):
        return params["mib"] + 1  # TypeError for {"mib": "x"}: our bug (no type check), not theirs

    path = tmp_path / "control.sock"
    await nursery.start(ControlServer(path, {"broken": broken, "echo": echo}).run)
    with pytest.raises(ControlError, match="internal error: TypeError"):
        await call(path, "broken", {"mib": "x"})
    assert "control method 'broken' failed" in caplog.text
    assert await call(path, "echo", {"ok": True}) == {"echo": {"ok": True}}


def test_a_schema_checks_types_bounds_and_names_and_names_the_field():
    from peertrain.node.api.control_schema import Field, Schema

    schema = Schema(
        Field("mib", int, 16, low=1, high=256),
        Field("speed", float, None),
        Field("role", str, "server", choices=("server", "trainer")),
        Field("name", str),
    )
    assert schema.check("m", {"name": "a", "speed": 2}) == {
        "mib": 16,
        "speed": 2.0,
        "role": "server",
        "name": "a",
    }
    for params, says in [
        ({"name": [1]}, "m: parameter 'name' must be str, not list"),
        ({"name": "a", "mib": True}, "m: parameter 'mib' must be int, not a boolean"),
        ({"name": "a", "mib": 0}, "m: parameter 'mib' must be 1..256, not 0"),
        ({"name": "a", "role": "boss"}, "m: parameter 'role' must be one of server, trainer"),
        ({}, "m: missing parameter 'name'"),
        ({"name": "a", "nmae": "b"}, "m: unknown parameter 'nmae' .it takes: mib, speed"),
    ]:
        with pytest.raises(ControlError, match=says):
            schema.check("m", params)
