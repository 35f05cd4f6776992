"""What a member's driver reports: `status`, the local swarm's report, the metrics, and the
`progress` of its long waits (swarm/progress.py words and logs it)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from peertrain.swarm.diloco.member.member import REJECTION_KINDS
from peertrain.swarm.progress import Download, Waiting

RECENT_ROUNDS = 16  # rounds of `history` in status
HISTORY = 64  # rounds of `history` kept


@dataclass
class DriverProgress:
    """What `status` shows and the local swarm reports."""

    round: int = 0
    loss: float | None = None
    initial_loss: float | None = None
    state_checksum: str = ""
    rounds_completed: int = 0
    resyncs: int = 0  # rounds repaired to the trusted state (by replay or by download)
    rejected_updates: int = 0
    # rejection_kind → count, every kind from the start (zeros included)
    rejected_by_reason: Counter[str] = field(
        default_factory=lambda: Counter(dict.fromkeys(REJECTION_KINDS, 0))
    )
    replays: int = 0  # rounds applied again from a trusted record instead of a download
    # rounds we closed with our own update alone while another member held a live lease: a
    # member that lost sight of its group (it never should: the churn run's defect)
    rounds_alone: int = 0
    state_downloads: int = 0  # states adopted by download
    state_donors: list[str] = field(default_factory=list)  # peers a download asked (the last 16)
    refused_states: int = 0  # downloads that failed or did not pass the checks
    phase: str = "starting"
    history: list[dict] = field(default_factory=list)
    waiting: Waiting | None = None  # for members, peers or updates, while that lasts
    inner_start: int = 0  # the inner loop's step count when this round's inner steps began
    outer_seconds: float = 0.0  # torch work of the last round after its exchange
    checkpoint_failures: int = 0  # checkpoints not written (a full disk, the disk budget)
    checkpoint_error: str = ""  # why the last one was not
    # totals over the rounds this member took part in: inner steps, seconds of torch work
    # (inner steps, encoding, outer steps) and of wall time from a round's first inner step to
    # its agreement; their difference is time spent waiting for the network
    steps: int = 0
    compute_seconds: float = 0.0
    wall_seconds: float = 0.0
    outer_total: float = 0.0  # of compute_seconds: aggregation and outer steps
    # the last round's split of its wall time (`split`), for its entry in `history`
    split: dict[str, float] = field(default_factory=dict)
    # checkpoints written, their seconds in all, and the last one's tensor bytes
    checkpoints_saved: int = 0
    checkpoint_seconds: float = 0.0
    checkpoint_bytes: int = 0

    def timed(self, *, steps: int, compute: float, wall: float) -> None:
        """A round's `steps` and seconds: `compute` of torch work, `outer_seconds` of it spent
        on aggregation and the outer step (the rest: inner steps and encoding), `wall` from its
        first inner step to agreement (the rest: the exchange and waiting for the group)."""
        outer = min(self.outer_seconds, compute)
        self.steps += steps
        self.compute_seconds += compute
        self.wall_seconds += wall
        self.outer_total += outer
        self.split = {
            "inner_s": round(compute - outer, 3),
            "exchange_s": round(max(wall - compute, 0.0), 3),
            "outer_s": round(outer, 3),
        }

    def closed(self, round_: int, loss: float, accepted: int, rejected: int) -> dict[str, Any]:
        """A round closed: its entry in `history` (the last HISTORY kept), returned."""
        self.loss, self.rounds_completed = loss, self.rounds_completed + 1
        entry = {"round": round_, "loss": loss, "accepted": accepted, "rejected": rejected}
        self.history.append({**entry, "time": time.time(), **self.split})
        del self.history[:-HISTORY]
        return self.history[-1]

    def checkpointed(self, seconds: float, tensors_bytes: int) -> None:
        self.checkpoints_saved += 1
        self.checkpoint_seconds += seconds
        self.checkpoint_bytes = tensors_bytes

    def checkpoint_failed(self, error: str) -> None:
        self.checkpoint_failures += 1
        self.checkpoint_error = error

    def timing(self) -> dict[str, Any]:
        """Steps, compute and wall seconds, and the fraction of wall time compute stood idle."""
        idle = 1 - self.compute_seconds / self.wall_seconds if self.wall_seconds else 0.0
        return {
            "steps": self.steps,
            "compute_s": round(self.compute_seconds, 3),
            "outer_s": round(self.outer_total, 3),
            "wall_s": round(self.wall_seconds, 3),
            "idle_fraction": round(max(idle, 0.0), 4),
            "checkpoints": self.checkpoints_saved,
            "checkpoint_s": round(self.checkpoint_seconds, 3),
            "checkpoint_bytes": self.checkpoint_bytes,
        }

    def status(
        self, *, rounds: int, inner_step: int, inner_steps: int, download: Download | None
    ) -> dict[str, Any]:
        """The run's `progress` in status: phase, inner step i/H, a download, a wait."""
        inner = inner_step - self.inner_start if self.phase == "inner steps" else 0
        return {
            "phase": self.phase,
            "round": self.round,
            "rounds": rounds,  # the run's length; 0: no end
            "inner_step": min(max(inner, 0), inner_steps),
            "inner_steps": inner_steps,
            "download": download.status() if download is not None else None,
            "waiting": self.waiting.status() if self.waiting is not None else None,
            "timing": self.timing(),
            # the last rounds' round, loss, accepted, rejected and time: a reader polling
            # status (the TensorBoard log) sees every round, also those shorter than its poll
            "recent_rounds": [dict(entry) for entry in self.history[-RECENT_ROUNDS:]],
        }
