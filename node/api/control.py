"""The local control API: JSON over a Unix socket in the node's home.

One request per connection: a JSON object `{"id": …, "method": "status", "params": {…}}` on
one line, answered by `{"id": …, "result": …}` or `{"id": …, "error": "…"}`. A Unix socket
(mode 0600 in a 0700 home) means only the owner can drive the daemon, with no port to guard and
no token to leak. Requests are bounded in size, time and concurrency like any network input.

Nothing a client sends can end the daemon: a request that is not an object with object params,
nesting deeper than `MAX_DEPTH`, or a parameter that its method's schema refuses (an unknown
field, a wrong type, out of bounds: control_methods.py checks each method's params before it
runs) is answered with a one-line error; a method that fails on our own bug is answered
"internal error", logged with its traceback, and the server goes on. Only cancellation leaves
`_serve_one`. The server itself is generic (any name → handler table): control_methods.py is
the daemon's table.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from ..errors import ControlError

log = logging.getLogger(__name__)

MAX_REQUEST = 64 * 1024
MAX_RESPONSE = 16 * 1024 * 1024
REQUEST_TIMEOUT = 10.0  # to send a whole request line
METHOD_TIMEOUT = 300.0  # to answer it: a join may wait for the DHT, then for the run's peers;
# the client decides how long it waits for the answer (its own `timeout`), this only bounds
# how long a call whose client went away can hold one of the `max_concurrent` slots
MAX_DEPTH = 32  # a 64 KiB line of "[[[[…" would otherwise reach the JSON decoder's recursion limit

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class ControlServer:
    """Serves registered methods on `path` until cancelled."""

    def __init__(self, path: Path, methods: dict[str, Handler], *, max_concurrent: int = 16):
        self.path = Path(path)
        self.methods = methods
        self._limiter = trio.CapacityLimiter(max_concurrent)

    async def run(self, *, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED) -> None:
        listener = await self._bind()
        try:
            async with trio.open_nursery() as nursery:
                async with listener:
                    task_status.started(self.path)
                    while True:
                        stream = await listener.accept()
                        nursery.start_soon(self._serve_one, stream)
        finally:
            self.path.unlink(missing_ok=True)

    async def _bind(self) -> trio.SocketListener:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.parent.stat().st_uid != os.getuid():
            raise ControlError(
                f"{self.path.parent} belongs to another user; "
                "refusing to put the control socket there"
            )
        if self.path.exists():
            await _refuse_if_live(self.path)
            self.path.unlink()
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket file is created 0600, never briefly wider
        try:
            await sock.bind(str(self.path))
        finally:
            os.umask(old_umask)
        sock.listen(16)
        return trio.SocketListener(sock)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        async with stream, self._limiter:
            request_id = name = None
            try:
                with trio.fail_after(REQUEST_TIMEOUT):
                    request = parse_request(await _read_line(stream, MAX_REQUEST))
                request_id, name = request.get("id"), request.get("method")
                method, params = self._resolve(request)
                with trio.fail_after(METHOD_TIMEOUT):
                    reply = {"id": request_id, "result": await method(params)}
            except trio.TooSlowError:
                reply = {"id": request_id, "error": f"{name or 'the request'} took too long"}
            except ControlError as exc:
                reply = {"id": request_id, "error": str(exc) or type(exc).__name__}
            except Exception as exc:  # noqa: BLE001 - our own bug in a method: answer, log, serve on
                log.exception("control method %r failed", name)
                reply = {"id": request_id, "error": f"internal error: {type(exc).__name__}: {exc}"}
            try:
                await stream.send_all(_dump(reply))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the client hung up before its answer: nothing to tell it

    def _resolve(self, request: dict[str, Any]) -> tuple[Handler, dict[str, Any]]:
        name = request.get("method", "")
        method = self.methods.get(name) if isinstance(name, str) else None
        if method is None:
            raise ControlError(f"unknown method {name!r}; known: {sorted(self.methods)}")
        params = request.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ControlError(f"params must be a JSON object, not {type(params).__name__}")
        return method, params


def parse_request(line: bytes) -> dict[str, Any]:
    """One request line as a dict, or ControlError saying what is wrong with it."""
    if _depth(line) > MAX_DEPTH:
        raise ControlError(f"request nests deeper than {MAX_DEPTH} levels")
    try:
        request = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ControlError(f"request is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise ControlError("request must be a JSON object")
    return request


def _depth(line: bytes) -> int:
    """Deepest bracket nesting, counted without parsing (brackets inside strings count too:
    a false alarm costs a legitimate client nothing, as no method takes 32 levels)."""
    if line.count(b"[") + line.count(b"{") <= MAX_DEPTH:
        return 0  # the common case, without a Python loop over the bytes
    depth = deepest = 0
    for byte in line:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def _dump(reply: dict[str, Any]) -> bytes:
    try:
        return json.dumps(reply).encode() + b"\n"
    except (TypeError, ValueError) as exc:  # a method returned something JSON cannot say
        log.error("control reply not serialisable: %s", exc)
        error = {"id": reply.get("id"), "error": f"internal error: {exc}"}
        return json.dumps(error).encode() + b"\n"


async def _read_line(stream: trio.abc.ReceiveStream, limit: int) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ControlError(f"message over {limit} bytes")
    return bytes(buf.split(b"\n", 1)[0])


async def _refuse_if_live(path: Path) -> None:
    try:
        stream = await trio.open_unix_socket(str(path))
    except OSError:
        return  # a stale socket from a daemon that died: safe to replace
    await stream.aclose()
    raise ControlError(
        f"another daemon is already running on this home ({path}); stop it or use another --home"
    )


async def call(
    path: Path, method: str, params: dict[str, Any] | None = None, *, timeout: float = 10.0
) -> Any:
    """Ask the daemon behind `path`; raise ControlError with a plain message when none answers."""
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_unix_socket(str(path))
            async with stream:
                await stream.send_all(
                    json.dumps({"id": 1, "method": method, "params": params or {}}).encode() + b"\n"
                )
                reply = json.loads(await _read_line(stream, MAX_RESPONSE))
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(
            f"no daemon is running on this home (no answer at {path}); "
            "start one with `peertrain node start`"
        ) from None
    except trio.TooSlowError:
        raise ControlError(f"the daemon at {path} did not answer within {timeout:.0f} s") from None
    except (OSError, ValueError) as exc:
        raise ControlError(f"could not talk to the daemon at {path}: {exc}") from None
    if "error" in reply:
        raise ControlError(reply["error"])
    return reply.get("result")


def call_sync(
    path: Path, method: str, params: dict[str, Any] | None = None, *, timeout: float = 10.0
) -> Any:
    """`call` for code that is not in trio (the CLI, the local swarm supervisor)."""
    return trio.run(lambda: call(path, method, params, timeout=timeout))
