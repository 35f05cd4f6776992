"""A stage server's checkpoints: written every few rounds, read when nobody serves its stage.

The policy half of stage checkpoints (the files are checkpoint.py's). A server writes the state
it would hand a mover once `checkpoint_every` averaging rounds have passed since its last write,
in the background, one write at a time. A server that takes a stage (at start, after a move)
downloads its state from a live server of it first, since the stage has moved on since any
checkpoint; only when none answers (all its servers died and restart, or nobody served it yet)
it loads its own newest checkpoint of that stage, so the stage resumes where it was instead of
at its seed. `resumed` says which.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from .checkpoint import StageCheckpoint, StageCheckpoints
from .migration import import_state

if TYPE_CHECKING:
    from .averaging import StageAverager
    from .run_spec import PipelineSpec
    from .stage import StageServer

log = logging.getLogger(__name__)


class StageCheckpointing:
    """The checkpoint side of `StageService` (which provides the attributes named here)."""

    spec: PipelineSpec
    stage: int
    averager: StageAverager | None
    _nursery: trio.Nursery | None
    _thread: trio.CapacityLimiter

    def __init__(self, checkpoints: StageCheckpoints | None) -> None:
        self.checkpoints = checkpoints
        self.resumed: dict[str, Any] = {"from": "seed", "round": 0}  # the state we started from
        self.saved_round = 0  # of our newest stage checkpoint
        self._saving = False

    async def _resume_from_disk(self, stage: int, server: StageServer) -> int:
        """Nobody serves `stage` (all its servers died, or we are its first): our newest
        checkpoint of it that verifies and fits, if any, rather than the seed."""
        found = None
        if self.checkpoints is not None:
            try:
                found = await trio.to_thread.run_sync(self.checkpoints.latest, stage)
            except OSError as exc:  # an unreadable folder: the seed, as with no checkpoint
                log.warning("stage %d checkpoints unreadable: %s", stage, exc)
        self.resumed = {"from": "seed", "round": 0}
        if found is not None:
            try:
                await trio.to_thread.run_sync(
                    import_state, server, found.flat, found.adam_step, limiter=self._thread
                )
            except ValueError as exc:  # a checkpoint of another shape of this stage
                log.warning("stage %d checkpoint of round %d unusable: %s", stage, found.round, exc)
                return 0
            self.resumed = {"from": "checkpoint", "round": found.round}
            self.saved_round = found.round
            log.info("stage %d resumed from our checkpoint of round %d", stage, found.round)
            return found.round
        return 0

    def _round_applied(self, stage: int, round_: int) -> None:
        # `every` rounds since our last save, not rounds divisible by it: a copy that re-syncs
        # from its stage jumps rounds and would miss every multiple while it keeps re-syncing
        every = self.spec.checkpoint_every
        due = every > 0 and round_ >= self.saved_round + every and self.checkpoints is not None
        if due and self._nursery is not None and not self._saving:
            self._saving = True  # one save at a time: a slow disk skips rounds, never piles up
            self._nursery.start_soon(self._save_checkpoint, stage)

    async def _save_checkpoint(self, stage: int) -> None:
        try:
            averager = self.averager
            if averager is None or self.checkpoints is None or self.stage != stage:
                return
            flat, adam_step, completed = await averager.export()
            checkpoint = StageCheckpoint(
                stage=stage, round=completed, adam_step=adam_step, flat=flat
            )
            await trio.to_thread.run_sync(self.checkpoints.save, checkpoint)
            self.saved_round = completed
        except OSError as exc:  # a full or read-only disk: we keep serving without
            log.warning("stage %d checkpoint failed: %s", stage, exc)
        finally:
            self._saving = False
