"""What a member's driver reports: `status`, the local swarm's report, the metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


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
