"""A node inside the user's own process: the daemon and its control socket on a background thread.

`peertrain.DiLoCo` needs a node next to the user's model (the model cannot cross a socket every
step), so it runs one here, the same Daemon that `peertrain node start` runs: its own trio loop
on a thread, reached from the user's thread through `trio.from_thread` (`call`). The home is a
temporary folder unless one is given; `peertrain status --home HOME` answers for it as usual.
"""

from __future__ import annotations

import functools
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio

from ..config import load_config
from ..daemon import Daemon
from ..errors import NodeError
from ..net.identity import load_or_create_identity
from .serve import serve_node

T = TypeVar("T")

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


class EmbeddedNode:
    """`EmbeddedNode(listen=…, peers=[addr]).start()` (exported as `peertrain.Node`); `stop()`
    (or `with`) ends it. `peers`: addresses of nodes to connect to (bootstrap peers)."""

    def __init__(
        self,
        *,
        home: str | Path | None = None,
        listen: Sequence[str] = ("/ip4/0.0.0.0/tcp/0",),
        peers: Sequence[str] = (),
        psk: str | None = None,
    ) -> None:
        self._tmp = None if home is not None else tempfile.TemporaryDirectory(prefix="peertrain-")
        self.home = Path(home if home is not None else self._tmp.name).expanduser()  # type: ignore[union-attr]
        overrides = {"listen": list(listen), "bootstrap": list(peers), "psk": psk}
        self.config = load_config(self.home, overrides)
        self.daemon: Daemon | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="peertrain-node", daemon=True)

    def start(self) -> EmbeddedNode:
        """Start the node; return once it serves (its failure to start is raised here)."""
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise NodeError(f"the embedded node did not start within {START_TIMEOUT:g} s")
        if self._failure is not None:
            raise NodeError(f"the embedded node failed to start: {self._failure}") from (
                self._failure
            )
        return self

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run `await fn(*args, **kwargs)` on the node's event loop; from any other thread."""
        if self._token is None:
            raise NodeError("the embedded node is not running")
        return trio.from_thread.run(functools.partial(fn, *args, **kwargs), trio_token=self._token)

    @property
    def address(self) -> str:
        """The address other machines give to join this node (best first)."""
        assert self.daemon is not None
        return self.daemon.addrs()[0]

    def request_stop(self) -> None:
        """Start stopping the node; `stop()` waits for it."""
        if self._token is not None and self._cancel is not None:
            try:
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass

    def stop(self) -> None:
        self.request_stop()
        self._thread.join(STOP_TIMEOUT)
        self._token = None
        if self._tmp is not None and not self._thread.is_alive():
            self._tmp.cleanup()

    def __enter__(self) -> EmbeddedNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits in start()
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        daemon = Daemon(self.config, load_or_create_identity(self.home))
        async with trio.open_nursery() as nursery:
            self._cancel = nursery.cancel_scope
            await nursery.start(serve_node, daemon)
            self.daemon = daemon
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
