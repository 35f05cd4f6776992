"""Fetching content-addressed tensors from the nodes that serve them (tensors.py).

`fetch_tensor` downloads one tensor from several holders at once: chunk ranges are handed to
one worker per holder; a holder that fails or lies (a chunk that does not match its digest) is
dropped and its range goes back to the queue, so the download resumes from verified chunks on
another holder. Any holder will do, since the checksum, not the holder, is trusted. A holder
whose connection broke (a relayed connection reset and redialed, a punched one replacing it)
is asked again once it is connected again: a few times, each within a few seconds.

A download is admitted against the daemon's receive-memory budget (node/net/budget.py) once its
header has passed every cheap check (size limit, expected checksum), before its buffer exists,
and gives the memory back when it ends; a fresh buffer's pages are faulted in as chunks land, so
memory follows the data, not the header's promise.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from peertrain.protocol.errors import ChecksumMismatch, DecodeError, RemoteError
from peertrain.protocol.messages import ErrorCode
from peertrain.protocol.tensor_transfer import fetch_chunks, request_header
from peertrain.protocol.tensors import TensorDownload

from ..errors import BudgetExceeded, TransferFailed
from ..net.budget import ResourceBudget
from ..net.penalties import PeerScoreboard
from .tensors import TENSOR

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CHUNKS_PER_REQUEST = 4
LYING_HOLDER_PENALTY = 50.0
RETRIES = 3  # times a holder whose stream broke is asked again (per download)
RECONNECT_WAIT = 5.0  # seconds it gets to be connected again (a circuit redial takes < 1 s)
RETRY_PAUSE = 0.2
REDIAL_GRACE = 1.0  # seconds left to whoever redials (hole punching) before `reconnect` runs


async def fetch_tensor(
    host: IHost,
    holders: Sequence[ID],
    checksum: bytes,
    *,
    max_nbytes: int,
    scoreboard: PeerScoreboard | None = None,
    idle_timeout: float = 15.0,
    allocate: Callable[[int], torch.Tensor] | None = None,
    retries: int = RETRIES,
    reconnect_wait: float = RECONNECT_WAIT,
    reconnect: Callable[[ID], Awaitable[Any]] | None = None,
    on_header: Callable[[TensorDownload], None] | None = None,
    budget: ResourceBudget | None = None,
) -> TensorDownload:
    """Download and verify tensor `checksum` from `holders` in parallel; raise TransferFailed.

    A holder whose stream breaks (its connection reset or replaced, e.g. a relayed one being
    redialed) is asked again, up to `retries` times, once a connection to it is back within
    `reconnect_wait` s; `reconnect(holder)` is called when none came back by itself. Verified
    chunks are kept, so the download resumes where it stopped. `allocate(nbytes)` may supply
    the payload buffer (node/net/receive_buffers.py). `on_header(download)` is told of the
    download once its size is known, to follow its `verified_nbytes` (progress displays).
    `budget` admits the download (module docstring): BudgetExceeded when its memory is spent."""
    holders = [h for h in dict.fromkeys(holders) if h != host.get_id()]
    again = _Retries(host, retries=retries, wait=reconnect_wait, reconnect=reconnect)
    admission = _Admission(budget, allocate, holders[0].to_base58() if holders else "")
    try:
        download, failures = await _first_header(
            host, holders, checksum, max_nbytes, idle_timeout, admission.allocate, again
        )
        if on_header is not None:
            on_header(download)
        ranges = _RangeFetch(host, download, again, failures, scoreboard, idle_timeout)
        await ranges.run(holders)
    finally:
        admission.release()
    if not download.complete:
        raise TransferFailed(
            f"could not fetch tensor {checksum.hex()[:16]}: " + "; ".join(failures[-4:])
        )
    return download


class _Admission:
    """Receive memory for one download, reserved when its checked header asks for a buffer."""

    def __init__(
        self,
        budget: ResourceBudget | None,
        allocate: Callable[[int], torch.Tensor] | None,
        peer: str,
    ) -> None:
        self.budget, self._allocate, self.peer = budget, allocate, peer
        self.reserved = 0

    def allocate(self, nbytes: int) -> torch.Tensor:
        if self.budget is not None and not self.reserved:
            self.budget.reserve_memory(self.peer, nbytes)  # raises BudgetExceeded
            self.reserved = nbytes
        if self._allocate is not None:
            return self._allocate(nbytes)
        import torch

        return torch.empty(nbytes, dtype=torch.uint8)  # pages faulted in as chunks land

    def release(self) -> None:
        if self.budget is not None and self.reserved:
            self.budget.release_memory(self.peer, self.reserved)
            self.reserved = 0


class _RangeFetch:
    """The chunks of one download after its header: one worker per holder takes ranges from a
    shared queue; a failed range goes back to it, its verified chunks kept."""

    def __init__(
        self,
        host: IHost,
        download: TensorDownload,
        again: _Retries,
        failures: list[str],
        scoreboard: PeerScoreboard | None,
        idle_timeout: float,
    ):
        self.host, self.download, self.again = host, download, again
        self.failures, self.scoreboard, self.idle_timeout = failures, scoreboard, idle_timeout
        self.pending = _split(download)
        self.alive: list[ID] = []

    async def run(self, holders: Sequence[ID]) -> None:
        """Until the download is complete or no holder is left."""
        self.alive = list(holders)
        while not self.download.complete and self.alive:
            async with trio.open_nursery() as nursery:
                for holder in list(self.alive):
                    nursery.start_soon(self._worker, holder, nursery)
            self.pending[:] = _split(self.download)

    async def _worker(self, holder: ID, nursery: trio.Nursery) -> None:
        while self.pending:
            first, count = self.pending.pop(0)
            try:
                await self._fetch_range(holder, first, count)
            except Exception as exc:  # noqa: BLE001 - whatever went wrong, the range goes to
                # another holder; the reason ends up in TransferFailed if none can supply it
                if not await self._failed(holder, first, count, exc):
                    return
                continue
            if self.download.complete:  # a worker waiting for its holder to come back stops too
                nursery.cancel_scope.cancel()

    async def _fetch_range(self, holder: ID, first: int, count: int) -> None:
        stream = await self.host.new_stream(holder, [str(TENSOR)])
        try:
            await fetch_chunks(
                stream,
                self.download,
                first_chunk=first,
                count=count,
                idle_timeout=self.idle_timeout,
            )
        finally:
            await stream.close()

    async def _failed(self, holder: ID, first: int, count: int, exc: Exception) -> bool:
        """Requeue the range; whether `holder` is still worth asking."""
        if isinstance(exc, ChecksumMismatch) and self.scoreboard is not None:
            self.scoreboard.penalise(
                holder.to_base58(), LYING_HOLDER_PENALTY, f"tensor chunk: {exc}"
            )
        self.failures.append(f"{holder}: {exc}")
        self.pending[:0] = _split(self.download, first, count)  # its verified chunks are kept
        if self.download.complete or not await self.again.worth_it(holder, exc):
            self.alive.remove(holder)
            return False
        return True


class _Retries:
    """Whether to ask a holder again after a failure: bounded per holder, and only once a
    connection to it is back (it may be redialed by hole punching, or by `reconnect`)."""

    def __init__(
        self,
        host: IHost,
        *,
        retries: int,
        wait: float,
        reconnect: Callable[[ID], Awaitable[Any]] | None,
    ):
        self.host, self.retries, self.wait, self.reconnect = host, retries, wait, reconnect
        self.used: dict[ID, int] = {}  # bounded by the holders of one download
        self.reconnects = 0

    async def worth_it(self, holder: ID, exc: BaseException) -> bool:
        if not _may_retry(exc) or self.used.get(holder, 0) >= self.retries:
            return False
        self.used[holder] = self.used.get(holder, 0) + 1
        log.info("tensor: %s failed (%s); asking it again once reconnected", holder, exc)
        return await self._connected(holder)

    async def _connected(self, holder: ID) -> bool:
        with trio.move_on_after(self.wait):
            await trio.sleep(RETRY_PAUSE)  # a reset connection takes a moment to leave the swarm
            with trio.move_on_after(REDIAL_GRACE if self.reconnect else self.wait):
                await self._until_connected(holder)
                return True
            if self.reconnect is not None:
                try:
                    await self.reconnect(holder)
                    self.reconnects += 1
                except Exception as exc:  # noqa: BLE001 - the caller's reconnect may fail in
                    # any way; not reachable now: the wait below decides
                    log.info("tensor: reconnecting to %s: %s", holder, exc)
                await self._until_connected(holder)
                return True
        return False

    async def _until_connected(self, holder: ID) -> None:
        # libp2p's notifications miss connections (docs/libp2p-notes.md): poll the swarm instead
        while not self.host.get_network().get_connections(holder):  # noqa: ASYNC110
            await trio.sleep(0.05)


def _may_retry(exc: BaseException) -> bool:
    """A broken or slow connection is worth another try; a lie or a refusal is not (a busy
    holder is)."""
    if isinstance(exc, RemoteError):
        return exc.code == ErrorCode.BUSY
    return not isinstance(exc, DecodeError)


async def _first_header(
    host: IHost,
    holders: Sequence[ID],
    checksum: bytes,
    max_nbytes: int,
    idle_timeout: float,
    allocate,
    again: _Retries,
) -> tuple[TensorDownload, list[str]]:
    """The header from the first holder that answers; the ones whose connection broke are
    asked again (once back) only after every other holder has been tried."""
    failures: list[str] = []
    candidates = list(holders)
    while candidates:
        broken: list[tuple[ID, Exception]] = []
        for holder in candidates:
            try:
                stream = await host.new_stream(holder, [str(TENSOR)])
                try:
                    header = await request_header(
                        stream,
                        checksum,
                        max_nbytes=max_nbytes,
                        idle_timeout=idle_timeout,
                        allocate=allocate,
                    )
                    return header, failures
                finally:
                    await stream.close()
            except BudgetExceeded:
                raise  # no other holder can change that: the caller hears it at once
            except Exception as exc:  # noqa: BLE001 - NOT_FOUND, dead holder, bad header,
                # libp2p's own types: try the next one; the reasons go into TransferFailed
                failures.append(f"{holder}: {exc}")
                broken.append((holder, exc))
        candidates = [holder for holder, exc in broken if await again.worth_it(holder, exc)]
    reasons = "; ".join(failures) or "no holders"
    raise TransferFailed(f"no holder has tensor {checksum.hex()[:16]}: {reasons}")


def _split(
    download: TensorDownload, first: int = 0, count: int | None = None
) -> list[tuple[int, int]]:
    """Missing chunks (of [first, first + count) when given) as ranges of at most
    CHUNKS_PER_REQUEST."""
    end = download.header.num_chunks if count is None else first + count
    out: list[tuple[int, int]] = []
    for index in (i for i in download.missing_chunks() if first <= i < end):
        if out and out[-1][0] + out[-1][1] == index and out[-1][1] < CHUNKS_PER_REQUEST:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((index, 1))
    return out
