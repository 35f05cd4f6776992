"""The local control API: JSON over a Unix socket in the node's home.

One request per connection: a JSON object `{"id": …, "method": "status", "params": {…}}` on
one line, answered by `{"id": …, "result": …}` or `{"id": …, "error": "…"}`. A Unix socket
(mode 0600 in a 0700 home) means only the owner can drive the daemon, with no port to guard and
no token to leak. Requests are bounded in size, time and concurrency like any network input.
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
REQUEST_TIMEOUT = 10.0

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
            request_id = None
            try:
                with trio.fail_after(REQUEST_TIMEOUT):
                    request = json.loads(await _read_line(stream, MAX_REQUEST))
                    if not isinstance(request, dict):
                        raise ControlError("request must be a JSON object")
                    request_id = request.get("id")
                    method = self.methods.get(request.get("method", ""))
                    if method is None:
                        raise ControlError(
                            f"unknown method {request.get('method')!r}; "
                            f"known: {sorted(self.methods)}"
                        )
                    params = request.get("params") or {}
                    reply = {"id": request_id, "result": await method(params)}
            except (ControlError, ValueError, trio.TooSlowError) as exc:
                reply = {"id": request_id, "error": str(exc) or type(exc).__name__}
            try:
                await stream.send_all(json.dumps(reply).encode() + b"\n")
            except trio.BrokenResourceError:
                pass


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
