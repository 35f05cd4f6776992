"""Where a stage server serves: the stage a joiner takes, and the rebalancing move of a period.

Both decide on the RunState view (membership.py) with the pure rules of rebalance.py, so every
peer that sees the same view reaches the same answer without talking:

- a **joiner** takes the stage with the most need, once someone else's claim is in view (a
  joiner that looks while the creator still builds its pipeline sees no server at all, and would
  take the creator's stage; rebalancing would undo it, a few periods later);
- every `rebalance_period`, at the middle of the period (peers' clocks agree on the period index
  there), each server evaluates `plan_move`; the period's mover downloads its new stage's state
  and switches (`StageService.become`). Only on a **settled view**: if who-serves-what changed
  since our previous look (a join, a death, someone else's move), we skip the period. Views
  converge by gossip; deciding while they still change is how two peers each see themselves as
  the period's mover. Our first look only records the view (a joiner's is the least settled of
  all). A view is not settled either while the move planned in an earlier period has not
  shown (its mover still downloads). No move while a trainer measures the static baseline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from .membership import in_static_phase, servers, stage_views
from .rebalance import Move, StageView, plan_move, stage_for_new_peer

if TYPE_CHECKING:
    from peertrain.crdt.runstate import RunState

    from .run_spec import PipelineSpec

log = logging.getLogger(__name__)

FIRST_CLAIM_WAIT = 5.0  # a joiner waits this long for a first server claim before choosing
CLAIM_POLL = 0.2
PENDING_PERIODS = 4  # periods a planned move has to show in the view before it is given up


class StageMoves:
    """The stage choices of `StageService` (which provides the attributes named here)."""

    spec: PipelineSpec
    state: RunState
    me: str
    creator: str
    stage: int
    become: Callable[..., Awaitable[None]]  # (stage, *, period): download the state, switch

    def views(self) -> list[StageView]:
        """One `StageView` per stage from RunState now (unmeasured servers at the mean)."""
        demands = [self.spec.demand(s) for s in range(self.spec.stages)]
        return stage_views(servers(self.state, self.spec.stages), demands)

    async def choose_stage(self) -> int:
        """The stage with the most need, once someone else's claim is in view."""
        if self.creator != self.me:
            with trio.move_on_after(FIRST_CLAIM_WAIT):
                while not set(servers(self.state, self.spec.stages)) - {self.me}:  # noqa: ASYNC110
                    await trio.sleep(CLAIM_POLL)  # a CRDT view: nothing to wait on but time
        return self.stage_with_most_need()

    def stage_with_most_need(self) -> int:
        entries = servers(self.state, self.spec.stages)
        entries.pop(self.me, None)  # a restarted server: our old record says nothing of need
        demands = [self.spec.demand(s) for s in range(self.spec.stages)]
        return stage_for_new_peer(stage_views(entries, demands))

    def layout(self) -> dict[str, int]:
        """Who serves which stage now: what a settled view must not have changed."""
        return {peer: e.stage for peer, e in servers(self.state, self.spec.stages).items()}

    async def rebalance_once(self, period: int) -> Move | None:
        """Period `period`'s move on the view now; made (and returned) if we are its mover."""
        move = plan_move(self.views(), period)
        if move is None or move.peer != self.me or move.source != self.stage:
            return None
        log.info(
            "rebalancing: moving from stage %d to %d (period %d)", move.source, move.target, period
        )
        await self.become(move.target, period=period)
        return move

    async def rebalance_loop(self, period_s: float) -> None:
        """Once per period, at its middle: the period's move, if the view is settled and no
        trainer measures the static baseline."""
        last: dict[str, int] | None = None
        expected: tuple[Move, int] | None = None  # the move planned on our view, and its period
        while True:
            now = time.time()
            midpoint = (int(now // period_s) + 0.5) * period_s
            await trio.sleep(midpoint - now if midpoint > now else midpoint + period_s - now)
            period = int(time.time() // period_s)
            layout = self.layout()
            if expected is not None and not _shown(expected, layout, period):
                last = layout
                continue
            settled, last, expected = layout == last, layout, None
            if settled and not in_static_phase(self.state):
                move = plan_move(self.views(), period)
                expected = (move, period) if move is not None else None
                await self.rebalance_once(period)


def _shown(expected: tuple[Move, int], layout: dict[str, int], period: int) -> bool:
    """Has the move planned in an earlier period shown in `layout` (or can it no longer)?

    The mover announces its new stage only once it holds that stage's state: until then the
    view looks settled and unchanged, and the next period would plan a second move on the same
    imbalance (4/1/1 became 2/3/1, then had to be undone). A move that has not shown after
    PENDING_PERIODS is given up (the mover saw another view, or died with it)."""
    move, planned = expected
    return layout.get(move.peer) != move.source or period - planned > PENDING_PERIODS
