"""What a member's driver reports: `status`, the local swarm's report, the metrics, and the
`progress` of its long waits (swarm/progress.py words and logs it)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..progress import Download, Waiting


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
    rejected_by_reason: Counter[str] = field(default_factory=Counter)  # rejection_kind → count
    replays: int = 0  # rounds applied again from a trusted record instead of a download
    state_downloads: int = 0  # states adopted by download
    refused_states: int = 0  # downloads that failed or did not pass the checks
    phase: str = "starting"
    history: list[dict] = field(default_factory=list)
    waiting: Waiting | None = None  # for members, peers or updates, while that lasts
    inner_start: int = 0  # the inner loop's step count when this round's inner steps began

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
        }
