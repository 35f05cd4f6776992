"""Every control method refuses a wrong field in one line that names it, and the daemon serves on.

One in-process daemon, its real control socket: for each method in the table
(node/api/control_methods.py), an unknown field and each field given the wrong type are
answered with a one-line error naming the method and the field, before the method runs (never
"internal error"), and `status` still answers after each.
"""

from __future__ import annotations

from peertrain.node.api.control import call
from peertrain.node.api.control_methods import METHODS
from peertrain.node.errors import ControlError
from peertrain.testing import open_test_swarm

# every method the daemon serves (those before the table was made, and `run.show` since): none
# may go missing from it
KNOWN = {
    "status",
    "run.create",
    "run.join",
    "run.list",
    "run.leave",
    "run.show",
    "run.export",
    "run.sample",
    "run.invite",
    "run.revoke",
    "diffusion.sample",
    "resolve_peer",
    "debug.offer",
    "debug.fetch",
}


def _wrong(kind) -> object:
    """A JSON value that is not of `kind`."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return 7 if str in kinds else "seven"


async def _refusal(socket, method: str, params: dict) -> str:
    try:
        result = await call(socket, method, params)
    except ControlError as exc:
        return str(exc)
    raise AssertionError(f"{method} {params} was answered: {str(result)[:200]}")


async def test_each_method_names_an_unknown_or_mistyped_field_in_one_line_and_serves_on():
    assert set(METHODS) == KNOWN
    async with open_test_swarm(1) as (node,):
        socket = node.config.control_socket
        for method, entry in METHODS.items():
            said = await _refusal(socket, method, {"colour": "blue"})
            assert said.startswith(f"{method}: unknown parameter 'colour'"), said
            for field in entry.schema.fields:
                required = {f.name: "x" for f in entry.schema.fields if f.default is ...}
                params = {**required, field.name: _wrong(field.kind)}
                said = await _refusal(socket, method, params)
                assert said.startswith(f"{method}: parameter {field.name!r} must be"), said
                assert "\n" not in said and "internal error" not in said
            assert (await call(socket, "status"))["peer_id"]
        assert node.runs.sessions == {}  # nothing ran on a refused call


async def test_out_of_bounds_values_are_refused_by_name():
    async with open_test_swarm(1) as (node,):
        socket = node.config.control_socket
        for method, params, says in [
            ("debug.offer", {"mib": 100000}, "debug.offer: parameter 'mib' must be 1..256"),
            ("run.join", {"name": "x", "role": "boss"}, "'role' must be one of server, trainer"),
            ("run.create", {"name": "x", "max_params": 0}, "'max_params' must be 1.."),
            ("resolve_peer", {"peer": "x", "timeout": -1}, "'timeout' must be 0..3600"),
        ]:
            assert says in await _refusal(socket, method, params)
