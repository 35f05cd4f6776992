"""A small GET-only HTTP/1.1 server on trio, for the metrics endpoint and the dashboard.

Why not a framework: the node serves four fixed paths to a scraper and a browser, and every
HTTP library worth its name would add more to an idle daemon's memory than this whole file. What
a public-facing server needs is here: a bounded request head, a deadline for reading it, at most
`max_connections` handled at once (when all are taken, the one that has waited longest without
sending its head is closed for the newcomer: idle sockets cannot lock the owner out), one
request per connection (`Connection: close`), nothing but GET and HEAD, and a `Host` guard: a
web page that rebinds its own DNS name to 127.0.0.1 reaches a loopback server with its own name
in `Host`, so a name is answered only when it is `localhost` or one the owner allowed; an IP
literal (no DNS involved) and a request without `Host` are answered.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import trio

from ..errors import BadRequest

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 8192  # request line and headers; browsers send about 1 KiB
READ_TIMEOUT = 10.0  # seconds to receive the head, and to send the answer
MAX_CONNECTIONS = 64
LOOPBACK_NAMES = frozenset({"localhost"})
LINGER_SECONDS = 1.0  # after answering, to read the rest of what a client sent
LINGER_READS = 16
ACCEPT_BACKOFF = 0.1  # seconds, after accept() failed


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[], HttpResponse]
REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class HttpServer:
    """Serves `routes` (path → handler) on `host:port`; `started((host, port))` once listening."""

    def __init__(
        self,
        routes: Mapping[str, Handler],
        host: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout: float = READ_TIMEOUT,
        allowed_hosts: Iterable[str] = (),
    ):
        """`allowed_hosts`: names besides `localhost` a `Host` header may carry."""
        self.routes = dict(routes)
        self.host, self.port = host, port
        self.read_timeout = read_timeout
        self.allowed_hosts = LOOPBACK_NAMES | {h.lower() for h in allowed_hosts}
        self._slots = trio.Semaphore(max_connections)
        # connections still waiting for their request head, oldest first: closed for newcomers
        self._waiting: dict[int, trio.CancelScope] = {}

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        bound = listeners[0].socket.getsockname()
        log.info("metrics and dashboard on http://%s:%d/", self.host, bound[1])
        async with trio.open_nursery() as nursery:  # connections run beside the accept loops
            for listener in listeners:
                nursery.start_soon(self._accept_on, listener, nursery)
            task_status.started((self.host, bound[1]))

    async def _accept_on(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                if self._slots.value == 0 and self._waiting:  # all taken: the longest silent
                    self._waiting.pop(next(iter(self._waiting))).cancel()  # makes room
                await self._slots.acquire()  # wait here: the backlog holds the rest
                try:
                    stream = await listener.accept()
                except OSError as exc:  # out of file descriptors, mostly: wait, do not die
                    self._slots.release()
                    log.warning("accepting an HTTP connection: %s", exc)
                    await trio.sleep(ACCEPT_BACKOFF)
                    continue
                except BaseException:
                    self._slots.release()
                    raise
                nursery.start_soon(self._serve_one, stream)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                with trio.move_on_after(self.read_timeout):
                    if await self._answer(stream):
                        await _linger(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client left: nothing to tell it
        finally:
            self._slots.release()

    async def _head(self, stream: trio.SocketStream) -> bytes | None:
        """The request head, or None when a newcomer needed this connection's slot first."""
        key = id(stream)
        with trio.CancelScope() as scope:
            self._waiting[key] = scope
            try:
                return await read_head(stream)
            finally:
                self._waiting.pop(key, None)
        return None

    async def _answer(self, stream: trio.SocketStream) -> bool:
        """Read a request and answer it; False when the connection was closed for a newcomer
        before it said anything (nothing to linger for)."""
        try:
            head = await self._head(stream)
            if head is None:
                return False
            method, path = parse_request_line(head)
        except BadRequest as exc:
            await stream.send_all(encode(HttpResponse(400, f"{exc}\n".encode())))
            return True
        host = host_header(head)
        if host is not None and not self._host_allowed(host):
            why = f"Host {host!r} is not this node's name; allow it in dashboard_hosts\n"
            await stream.send_all(encode(HttpResponse(403, why.encode())))
            return True
        if method not in ("GET", "HEAD"):
            await stream.send_all(encode(HttpResponse(405, b"GET only\n")))
            return True
        handler = self.routes.get(path.partition("?")[0])
        response = _call(handler) if handler else HttpResponse(404, b"not found\n")
        await stream.send_all(encode(response, head_only=method == "HEAD"))
        return True

    def _host_allowed(self, host: str) -> bool:
        name = _host_name(host).lower()
        try:
            ipaddress.ip_address(name)
            return True  # an IP literal: no DNS name an attacker could rebind
        except ValueError:
            return name in self.allowed_hosts


def _call(handler: Handler) -> HttpResponse:
    try:
        return handler()
    except Exception:  # noqa: BLE001 - a bug behind one page must not stop the node
        log.exception("HTTP handler failed")
        return HttpResponse(500, b"internal error; see the node's log\n")


async def _linger(stream: trio.SocketStream) -> None:
    """Close our side first and read what the client still sends (briefly, bounded): closing a
    socket with unread input resets the connection, and the client may lose the answer."""
    await stream.send_eof()
    with trio.move_on_after(LINGER_SECONDS):
        for _ in range(LINGER_READS):
            if not await stream.receive_some(65536):
                break


async def read_head(stream: trio.abc.ReceiveStream) -> bytes:
    """Bytes up to the blank line that ends the request head (a GET has no body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise BadRequest(f"request head over {MAX_HEAD_BYTES} bytes")
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise BadRequest("connection closed before the request head ended")
        data += chunk
    return data.partition(b"\r\n\r\n")[0]


def _host_name(host: str) -> str:
    """'localhost:9464' → 'localhost'; '[::1]:9464' → '::1'; '127.0.0.1' → '127.0.0.1'."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_header(head: bytes) -> str | None:
    """The `Host` header's value, or None without one."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return value.strip().decode("latin-1")
    return None


def parse_request_line(head: bytes) -> tuple[str, str]:
    line = head.partition(b"\r\n")[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise BadRequest("not an HTTP/1.x request line")
    return parts[0], parts[1]


def encode(response: HttpResponse, *, head_only: bool = False) -> bytes:
    reason = REASONS.get(response.status, "")
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Cache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else response.body)
