"""`--tensorboard DIR`: every run this node takes part in, logged per round to TensorBoard.

Researchers watch runs in TensorBoard; a member needs no collector or account for it, only the
`tensorboard` package (`pip install 'peertrain[tensorboard]'`; config.py refuses the option
without it). Each run gets a folder of its own, `DIR/<name>-<run ID's first 12 hex>` (a name
is a label anyone may reuse, the ID is not), and one scalar point per round, at step = round:

    loss                  the member's evaluation loss after the round
    round                 the round reached (against wall time: how fast rounds go)
    members               live members of the run
    samples_per_s         this member's training speed, as its progress report in the run
                          state gives it (the run-wide view's row: as fresh as its lease)
    inner_steps_per_s     inner steps over wall time of the rounds taken part in (status now)
    run_samples_per_s     every member's claimed speed, summed (the run-wide view)
    update_bytes_sent     outer-update bytes this member has published since it started
    update_bytes_received and fetched

It reads the node's status, as the dashboard does, so it needs nothing from the training code:
a round is logged when the status first shows it (polled every `POLL_S`). Rounds shorter than
the poll that passed between two polls get their loss and round from the status's
`recent_rounds` (a DiLoCo member's last 16); the other figures are the node's now, so they are
written at the newest round only. Writing runs on a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from .history import runs_of
from .readings import NodeReadings

POLL_S = 0.25
Points = dict[int, dict[str, float]]  # round -> {tag: value}


class TensorBoardLog:
    def __init__(self, node: NodeReadings, folder: Path) -> None:
        self.node, self.folder = node, Path(folder).expanduser().absolute()
        self._writers: dict[str, Any] = {}  # run ID -> SummaryWriter
        self._logged: dict[str, int] = {}  # run ID -> newest round written

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # torch's writer imports tensorboard (protobufs, numpy): off the event loop
        await trio.to_thread.run_sync(_writer_class)
        task_status.started()
        try:
            while True:
                points = self.new_rounds(self.node.status())
                if points:
                    await trio.to_thread.run_sync(self.write, points)
                await trio.sleep(POLL_S)
        finally:
            for writer in self._writers.values():
                writer.close()

    def new_rounds(self, status: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Points]]:
        """(run status, {round: scalars}) for each run whose round moved past the last one
        written: the rounds passed between two polls from `recent_rounds`, then the newest."""
        found = []
        for run in runs_of(status):
            round_, last = run.get("round"), self._logged.get(run["run_id"], 0)
            if not isinstance(round_, int) or round_ <= last:
                continue
            self._logged[run["run_id"]] = round_
            recent = (run.get("progress") or {}).get("recent_rounds") or []
            points: Points = {
                r["round"]: _figures(loss=r.get("loss"), round=r["round"])
                for r in recent
                if isinstance(r.get("round"), int) and last < r["round"] < round_
            }
            points[round_] = scalars(run)
            found.append((run, points))
        return found

    def write(self, found: list[tuple[Mapping[str, Any], Points]]) -> None:
        for run, points in found:
            writer = self._writers.get(run["run_id"])
            if writer is None:
                log_dir = self.folder / f"{_safe(run['name'])}-{run['run_id'][:12]}"
                writer = self._writers[run["run_id"]] = _writer_class()(log_dir=str(log_dir))
            for round_, figures in sorted(points.items()):
                for tag, value in figures.items():
                    writer.add_scalar(tag, value, global_step=round_)
            writer.flush()  # a round is on disk when it is logged: TensorBoard reloads it


def scalars(run: Mapping[str, Any]) -> dict[str, float]:
    """The figures of one round, those the run's status has (a diffusion run lacks the view)."""
    view = run.get("view") or {}
    mine = next((row for row in view.get("members", []) if row.get("me")), {})
    timing = (run.get("progress") or {}).get("timing") or {}
    wall = timing.get("wall_s") or 0.0
    return _figures(
        loss=run.get("loss"),
        round=run.get("round"),
        members=len(run.get("members", [])),
        samples_per_s=mine.get("samples_per_s"),
        run_samples_per_s=view.get("samples_per_s"),
        inner_steps_per_s=timing.get("steps", 0) / wall if wall > 0 else None,
        update_bytes_sent=run.get("bytes_published"),
        update_bytes_received=run.get("bytes_fetched"),
    )


def _figures(**figures: Any) -> dict[str, float]:
    """The figures known (None: unknown, not written) as floats, by tag."""
    return {tag: float(value) for tag, value in figures.items() if value is not None}


def _writer_class():
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter


def _safe(name: str) -> str:
    """A run name as one path component (names are anyone's labels: no '/', no '..')."""
    kept = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return kept[:64] or "run"
