"""Averaging within a stage over the network: numbered all-gather rounds; the first ready leads.

Servers of one stage must apply the same averaged gradient at every step, or their parameters
drift apart and a backward recomputed on another server no longer matches its forward. Each step
is a numbered round k. A server starts round k when its own accumulated samples reach its share
of the stage's target batch (`target_batch / servers in the stage`): it takes its gradient sum
(`StageServer.take_gradients`) and asks every other live server of the stage for *their* round-k
contribution. A server asked for round k that has not started it yet takes its gradients on the
spot and starts round k itself: the first server to be ready drives the step, and the others
contribute whatever they have accumulated (no server waits for a slow peer to fill its share).
Every participant sums the same contributions (its own plus everyone else's, sample-weighted)
in the same order (by peer ID: float addition is not associative, and Adam's first steps turn
a 1e-9 difference in a near-zero gradient into a ±lr difference in the weights), and steps, so
the stage stays bitwise identical.

Why an all-gather and not a leader that reduces and broadcasts: no election, nothing to fail
over, and per round each server sends its gradient to n-1 peers, which for a stage of a few
servers of a small slice costs less than one more round trip. A peer that asked us for round k
but was not in our view of the stage (it has just moved in) is fetched from too, so a mover's
first contribution is not lost on the servers that had not seen its announcement yet. A peer
that fails to answer is left out of the round (it is dead or has left the stage); a peer left
out by some servers but not others makes the stage's copies differ slightly until the next move
resynchronises them: the asynchrony SWARM accepts.

Contributions of the last `keep` rounds are kept to answer late askers; older rounds are
refused. Everything torch happens in worker threads; the round logic runs on the event loop.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

import torch
import trio

from .stage import StageServer

log = logging.getLogger(__name__)

Contribution = tuple[torch.Tensor, int]  # (flat sample-weighted gradient sum, samples)
Fetch = Callable[[str, int], Awaitable[Contribution]]


class StageAverager:
    """The step rounds of one server in one stage; see the module docstring."""

    def __init__(
        self,
        server: StageServer,
        *,
        me: str,
        fetch: Fetch,
        peers: Callable[[], Iterable[str]],
        completed: int = 0,
        keep: int = 4,
        timeout: float = 5.0,
    ) -> None:
        self.server = server
        self.me = me
        self.fetch = fetch
        self.peers = peers  # the other live servers of this stage, as we see them now
        self.completed = completed  # rounds applied
        self.taken = completed  # rounds whose own contribution is taken
        self.keep = keep
        self.timeout = timeout
        self._own: OrderedDict[int, Contribution] = OrderedDict()
        self._ready: dict[int, trio.Event] = {}  # set once our contribution to that round is taken
        self._askers: dict[int, set[str]] = {}
        self._order = trio.Lock()  # rounds are applied one at a time, in order
        self._thread = trio.CapacityLimiter(1)
        self.contributors: list[int] = []  # servers per applied round (last few)

    async def maybe_start(self, nursery: trio.Nursery, share: int) -> None:
        """Start the next round if this server's pending samples reached `share`."""
        if self.taken == self.completed and self.server.pending_samples >= max(1, share):
            await self._take(self.taken + 1)
            nursery.start_soon(self._round, self.taken)

    async def contribution(
        self, nursery: trio.Nursery, step: int, asker: str
    ) -> Contribution | None:
        """Our contribution to round `step` for a peer; starts that round if it is the next one.
        None: a round we no longer keep, or one more than one ahead of us."""
        if step == self.taken + 1:
            await self._take(step)
            nursery.start_soon(self._round, step)
        self._askers.setdefault(step, set()).add(asker)
        while len(self._askers) > 2 * self.keep:
            self._askers.pop(min(self._askers))
        ready = self._ready.get(step)
        if ready is not None:
            await ready.wait()  # another asker made us take it a moment ago; the thread is busy
        return self._own.get(step)

    async def _take(self, step: int) -> None:
        self.taken = step
        self._ready[step] = ready = trio.Event()
        try:
            self._own[step] = await trio.to_thread.run_sync(
                self.server.take_gradients, limiter=self._thread
            )
        finally:
            ready.set()
        while len(self._own) > self.keep:
            self._ready.pop(next(iter(self._own)), None)
            self._own.popitem(last=False)

    async def _round(self, step: int) -> None:
        async with self._order:
            own = self._own.get(step)
            if own is None or step != self.completed + 1:
                return
            parts: dict[str, Contribution] = {}
            tried: set[str] = set()
            while True:  # again for askers that appeared while we gathered
                todo = (set(self.peers()) | self._askers.get(step, set())) - tried
                if not todo:
                    break
                tried |= todo
                async with trio.open_nursery() as nursery:
                    for peer in todo:
                        nursery.start_soon(self._gather, peer, step, own[0].shape, parts)
            parts[self.me] = own
            total, samples = torch.zeros_like(own[0]), 0
            for peer in sorted(parts):  # one order everywhere: bitwise-equal sums on every server
                total += parts[peer][0]
                samples += parts[peer][1]
            await trio.to_thread.run_sync(
                self.server.apply_average, total, samples, limiter=self._thread
            )
            self.completed = step
            self.contributors = [*self.contributors[-15:], len(parts)]

    async def _gather(
        self, peer: str, step: int, shape: torch.Size, parts: dict[str, Contribution]
    ) -> None:
        with trio.move_on_after(self.timeout):
            try:
                flat, n = await self.fetch(peer, step)
            except Exception as exc:  # dead, left the stage, or refused: leave it out of the round
                log.debug("stage round %d: no contribution from %s: %r", step, peer, exc)
                return
            if flat.shape != shape or n < 0:
                log.warning("stage round %d: %s sent a malformed contribution", step, peer)
                return
            parts[peer] = (flat, n)
