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
out by some servers but not others makes the stage's copies differ. That drift is caught and
repaired here (drift.py): each contribution to round k carries its sender's state checksum after
round k-1; once a server has gathered round k it compares those with its own, and if its copy
lost to the stage's majority, it downloads the state from a winner (`fetch_state`) before it
applies round k (or skips it, when the donor's state already includes it).

Nobody's word about itself is taken as is. A contribution's sample count is clipped to
`max_samples` (what the run's batch allows one server: a claim of 2^40 samples would otherwise
weigh the average to its sender), and every contribution passes the validation of outer
updates (swarm/aggregation/validation.py) before it is summed: finite, and a per-sample norm at
most `max_norm_ratio` (4×) the median of the round's. Every server judges the same set the same
way, so the stage stays identical.

Contributions of the last `keep` rounds are kept to answer late askers; older rounds are
refused. Everything torch happens in worker threads; the round logic runs on the event loop.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import NamedTuple

import torch
import trio

from ..aggregation.validation import RUN_MAX_NORM_RATIO, judge_values
from .drift import (
    UNTRUSTED_LEAD,
    DriftGuard,
    Refused,
    Repair,
    flat_checksum,
    repair_problem,
    state_checksum,
)
from .errors import ServerUnavailable
from .migration import export_state, import_state
from .stage import StageServer

log = logging.getLogger(__name__)


class StageContribution(NamedTuple):
    flat: torch.Tensor  # the flat sample-weighted gradient sum
    samples: int
    checksum: bytes = b""  # the sender's state checksum after the previous round; b"": unknown


StageState = tuple[torch.Tensor, int, int]  # (flat state, Adam step, rounds applied): migration.py
Fetch = Callable[[str, int], Awaitable[StageContribution | tuple[torch.Tensor, int]]]
FetchState = Callable[[str], Awaitable[StageState]]


class StageAverager:
    """The step rounds of one server in one stage; see the module docstring.

    `fetch_state(peer)` downloads a peer's stage state (None: drift is counted, never repaired);
    `may_repair()` says whether a repair may run now (False while the server moves);
    `applied(round)` is called on the event loop after each round this server applied, and
    after a re-sync with the round of the state it adopted; `trusted()` names the run's trusted
    signers, whose reports alone decide a drift where they serve the stage (None: a private
    stage, every server is trusted; drift.py)."""

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
        fetch_state: FetchState | None = None,
        may_repair: Callable[[], bool] = lambda: True,
        max_samples: int | None = None,
        max_norm_ratio: float | None = RUN_MAX_NORM_RATIO,
        applied: Callable[[int], None] = lambda round_: None,
        trusted: Callable[[], Collection[str]] | None = None,
        blame: Callable[[str, str], None] = lambda peer, why: None,
    ) -> None:
        self.server = server
        self.me = me
        self.fetch = fetch
        self.peers = peers  # the other live servers of this stage, as we see them now
        self.completed = completed  # rounds applied
        self.taken = completed  # rounds whose own contribution is taken
        self.keep = keep
        self.timeout = timeout
        self.fetch_state = fetch_state
        self.may_repair = may_repair
        self.max_samples = max_samples  # the run's batch: no contribution counts for more
        self.max_norm_ratio = max_norm_ratio
        self.applied = applied  # told each round applied (the service checkpoints after some)
        self.trusted = trusted
        self.blame = blame  # told of a donor that served a lie or a poison (drift.py's Refused)
        self.refused = 0  # contributions left out by validation
        self.drift = DriftGuard()
        self._own: OrderedDict[int, StageContribution] = OrderedDict()
        self._ready: dict[int, trio.Event] = {}  # set once our contribution to that round is taken
        self._askers: dict[int, set[str]] = {}
        self._checksums: OrderedDict[int, bytes] = OrderedDict()  # ours, after each round
        self._order = trio.Lock()  # rounds are applied one at a time, in order
        self._applying = trio.Lock()  # held while the state and `completed` change together
        self._thread = trio.CapacityLimiter(1)
        self.contributors: list[int] = []  # servers per applied round (last few)

    async def maybe_start(self, nursery: trio.Nursery, share: int) -> None:
        """Start the next round if this server's pending samples reached `share`."""
        if self.taken == self.completed and self.server.pending_samples >= max(1, share):
            await self._take(self.taken + 1)
            self._start_round(nursery, self.taken)

    def _start_round(self, nursery: trio.Nursery, step: int) -> None:
        try:
            nursery.start_soon(self._round, step)
        except RuntimeError:  # trio: "Nursery is closed to new arrivals"
            # The stage service stopped (killed, or moved to another stage) while a late call
            # took this round: a round started now would be cancelled at once, and whoever
            # serves the stage next averages it. Not our bug, not the caller's.
            log.info("stage averaging: round %d not started, the service has stopped", step)

    async def contribution(
        self, nursery: trio.Nursery, step: int, asker: str
    ) -> StageContribution | None:
        """Our contribution to round `step` for a peer; starts that round if it is the next one.
        None: a round we no longer keep, or one more than one ahead of us."""
        if step == self.taken + 1:
            await self._take(step)
            self._start_round(nursery, step)
        self._askers.setdefault(step, set()).add(asker)
        while len(self._askers) > 2 * self.keep:
            self._askers.pop(min(self._askers))
        ready = self._ready.get(step)
        if ready is not None:
            await ready.wait()  # another asker made us take it a moment ago; the thread is busy
        own = self._own.get(step)
        if own is None:
            return None
        return own._replace(checksum=await self.checksum(step - 1))

    async def checksum(self, round_: int) -> bytes:
        """Our state checksum after round `round_`: b"" if that is neither kept nor now."""
        if round_ not in self._checksums and round_ == self.completed:
            async with self._applying:
                if round_ == self.completed and round_ not in self._checksums:
                    self._remember(
                        round_,
                        await trio.to_thread.run_sync(
                            state_checksum, self.server, limiter=self._thread
                        ),
                    )
        return self._checksums.get(round_, b"")

    async def export(self) -> StageState:
        """Our stage state for a mover or a drifted peer, with the round it is the state after."""
        async with self._applying:
            flat, adam_step = await trio.to_thread.run_sync(export_state, self.server)
            return flat, adam_step, self.completed

    def _remember(self, round_: int, checksum: bytes) -> None:
        self._checksums[round_] = checksum
        while len(self._checksums) > self.keep + 2:
            self._checksums.popitem(last=False)

    async def _take(self, step: int) -> None:
        self.taken = step
        self._ready[step] = ready = trio.Event()
        try:
            flat, samples = await trio.to_thread.run_sync(
                self.server.take_gradients, limiter=self._thread
            )
            self._own[step] = StageContribution(flat, samples)
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
            mine = await self.checksum(step - 1)
            parts = await self._gather_all(step, own)
            reports = {peer: part.checksum for peer, part in parts.items() if part.checksum}
            trusted = None if self.trusted is None else frozenset(self.trusted())
            repair = self.drift.check(step - 1, self.me, {**reports, self.me: mine}, trusted)
            if repair is not None and await self._repair(repair) and self.completed >= step:
                return  # the state we adopted already includes this round
            parts = self._validated(step, parts)
            total, samples = torch.zeros_like(own.flat), 0
            for peer in sorted(parts):  # one order everywhere: bitwise-equal sums on every server
                total += parts[peer].flat
                samples += parts[peer].samples
            async with self._applying:
                checksum = await trio.to_thread.run_sync(
                    self._apply, total, samples, limiter=self._thread
                )
                self.completed = step
                self._remember(step, checksum)
            self.contributors = [*self.contributors[-15:], len(parts)]
            self.applied(step)

    def _validated(
        self, step: int, parts: dict[str, StageContribution]
    ) -> dict[str, StageContribution]:
        """The contributions that pass validation: finite, per-sample norm within bounds."""
        peers = sorted(parts)
        sq_norms = torch.tensor(
            [
                float(parts[p].flat.double().square().sum()) / max(parts[p].samples, 1) ** 2
                for p in peers
            ],
            dtype=torch.float64,
        )
        verdicts = judge_values(range(len(peers)), sq_norms, max_norm_ratio=self.max_norm_ratio)
        refused = [(peers[v.index], v.detail) for v in verdicts if not v.accepted]
        for peer, why in refused:
            log.warning("stage round %d: left out the contribution of %s: %s", step, peer, why)
        self.refused += len(refused)
        return {p: parts[p] for p, v in zip(peers, verdicts, strict=True) if v.accepted}

    def _apply(self, total: torch.Tensor, samples: int) -> bytes:
        self.server.apply_average(total, samples)
        return state_checksum(self.server)

    async def _gather_all(self, step: int, own: StageContribution) -> dict[str, StageContribution]:
        parts: dict[str, StageContribution] = {}
        tried: set[str] = set()
        while True:  # again for askers that appeared while we gathered
            todo = (set(self.peers()) | self._askers.get(step, set())) - tried
            if not todo:
                break
            tried |= todo
            async with trio.open_nursery() as nursery:
                for peer in todo:
                    nursery.start_soon(self._gather, peer, step, own.flat.shape, parts)
        parts[self.me] = own
        return parts

    async def _gather(
        self, peer: str, step: int, shape: torch.Size, parts: dict[str, StageContribution]
    ) -> None:
        with trio.move_on_after(self.timeout):
            try:
                got = StageContribution(*await self.fetch(peer, step))
            except ServerUnavailable as exc:  # dead, left the stage, or refused: leave it out
                log.debug("stage round %d: no contribution from %s: %r", step, peer, exc)
                return
            if got.flat.shape != shape or got.samples < 0:
                log.warning("stage round %d: %s sent a malformed contribution", step, peer)
                return
            if self.max_samples is not None and got.samples > self.max_samples:
                log.warning(
                    "stage round %d: %s claims %d samples; counted as %d",
                    step,
                    peer,
                    got.samples,
                    self.max_samples,
                )
                got = got._replace(samples=self.max_samples)
            parts[peer] = got

    async def _repair(self, repair: Repair) -> bool:
        """Adopt the stage state of one of the winner's holders; True if we did.

        A donor still at `repair.round` must hand over exactly the winning checksum; one that has
        applied later rounds (it raced ahead while we gathered: routine) is taken as it is, as a
        mover takes its donor's state, if it is trusted or claims at most UNTRUSTED_LEAD rounds
        more (a round is a claim about oneself). Never a state older than ours, and never one
        that fails drift.py's `repair_problem` (not finite, or further from ours than Adam could
        move it)."""
        ok = False
        if self.fetch_state is not None and self.may_repair():
            for donor in repair.donors[:2]:
                ok = await self._adopt_from(donor, repair)
                if ok:
                    break
        self.drift.repaired(ok)
        if ok:
            log.info("stage drift at round %d: re-synced from the majority", repair.round)
            self.applied(self.completed)  # an adopted state is as good a checkpoint as one applied
        return ok

    async def _adopt_from(self, donor: str, repair: Repair) -> bool:
        assert self.fetch_state is not None
        with trio.move_on_after(2 * self.timeout):
            try:
                flat, adam_step, rounds = await self.fetch_state(donor)
            except ServerUnavailable as exc:  # the donor left, moved or died: try the next
                log.info("stage state from %s for a re-sync failed: %r", donor, exc)
                return False
            if rounds < self.completed or not self.may_repair():
                return False
            if rounds > repair.round + UNTRUSTED_LEAD and donor not in repair.trusted:
                log.info(
                    "stage state from %s claims round %d, %d after the one decided: not believed",
                    donor,
                    rounds,
                    rounds - repair.round,
                )
                return False
            expect = repair.checksum if rounds == repair.round else None
            lead = rounds - self.completed
            async with self._applying:
                checksum = await trio.to_thread.run_sync(
                    self._import, flat, adam_step, expect, lead, limiter=self._thread
                )
                if isinstance(checksum, Refused):
                    log.warning(
                        "stage state from %s refused for a re-sync: %s", donor, checksum.why
                    )
                    if checksum.hostile:
                        self.blame(donor, f"stage state for a re-sync: {checksum.why}")
                    return False
                self.completed, self.taken = rounds, max(self.taken, rounds)
                self._remember(rounds, checksum)
            return True
        return False

    def _import(
        self, flat: torch.Tensor, adam_step: int, expect: bytes | None, lead: int
    ) -> bytes | Refused:
        """Load a downloaded state (sync) and return its checksum; nothing loaded if it does
        not fit this stage, is not the one expected, or fails `repair_problem`."""
        numel = sum(p.numel() for p in self.server._params)
        if flat.shape != (3 * numel,):
            return Refused(f"{flat.numel()} values do not fit this stage", hostile=True)
        if expect is not None and flat_checksum(flat, numel, adam_step) != expect:
            return Refused("not the state its holder reported", hostile=True)
        own = torch.cat([p.detach().reshape(-1) for p in self.server._params])
        lr = max(float(g["lr"]) for g in self.server._optimizer.param_groups)
        problem = repair_problem(flat, own, lr=lr, lead=lead)
        if problem is not None:
            return problem
        import_state(self.server, flat, adam_step)
        return state_checksum(self.server)
