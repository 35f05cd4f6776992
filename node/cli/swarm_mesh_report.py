"""The report of a local DiLoCo swarm (swarm_mesh.py): what its honest members end with, what
the run moved against data parallel, and what its members' logs say happened."""

from __future__ import annotations

from typing import Any

import psutil

from .swarm_events import catch_ups
from .swarm_mesh_rounds import rounds_report


class PeakMemory:
    """Each daemon's peak resident memory (MB) over the polls, over all its lives."""

    def __init__(self) -> None:
        self._peak: dict[int, float] = {}

    def sample(self, daemons) -> None:
        for index, daemon in enumerate(daemons):
            if daemon.process is None or not daemon.alive():
                continue
            try:
                rss = psutil.Process(daemon.process.pid).memory_info().rss / (1 << 20)
            except psutil.Error:  # it exited between the check and the read
                continue
            self._peak[index] = max(self._peak.get(index, 0.0), round(rss, 1))

    def peaks(self, n: int) -> list[float | None]:
        return [self._peak.get(i) for i in range(n)]


def training_report(swarm) -> dict[str, Any]:
    from peertrain.swarm.exchange.traffic import data_parallel_bytes

    honest = len(swarm.statuses) - swarm.options.byzantine
    runs = [  # what honest members still in the swarm end with
        s["run"]
        for i, s in enumerate(swarm.statuses[:honest])
        if s and s.get("run") and i not in swarm.died
    ]
    if not runs:
        return {"rounds_completed": 0}
    first = runs[0]
    rounds = min(r["round"] for r in runs)
    return {
        "rounds_completed": rounds,
        "initial_loss": first["initial_loss"],
        "final_loss": _mean(r["loss"] for r in runs),  # None: a restarted one has none yet
        "loss_by_round": _loss_by_round(first),
        "state_hashes": [r["state_checksum"] for r in runs],
        "bytes_sent": sum(r["bytes_fetched"] for r in runs) + swarm.bytes_of_killed,
        "ddp_bytes": data_parallel_bytes(
            first["params"], steps=rounds * first["inner_steps"], members=len(swarm.daemons)
        ),
        "params": first["params"],
        "members": swarm.options.nodes - swarm.options.byzantine,  # at the start
        "spec": swarm.options.spec,  # what the run was created with (a baseline rebuilds it)
        "resyncs": sum(r["resyncs"] for r in runs),
        "rounds_alone": rounds_alone(swarm.daemons),
        "state_downloads": sum(r.get("state_downloads", 0) for r in runs),
        "catch_ups": catch_ups(swarm.daemons),
        **rounds_report(swarm),
        "dropped": _summed(r.get("dropped", {}) for r in runs),
        "rejected_updates": sum(r["rejected_updates"] for r in runs),
        "byzantine": swarm.options.byzantine,
        "attack": swarm.options.attack if swarm.options.byzantine else None,
        **swarm.score_watch.report(swarm.statuses, honest),
    }


def rounds_alone(daemons) -> int:
    """Rounds any member closed with its own update alone while others were live, over
    all its lives (a restart forgets its count; its log, appended to, does not)."""
    from peertrain.swarm.diloco.group.alone import ROUND_ALONE

    marker = f'"event": "{ROUND_ALONE}"'
    return sum(
        d.log_path.read_text(errors="replace").count(marker) for d in daemons if d.log_path.exists()
    )


def _summed(counts) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for kind, n in one.items():
            total[kind] = total.get(kind, 0) + n
    return total


def _loss_by_round(run: dict[str, Any]) -> dict[int, float]:
    """A member's eval loss after each of its last rounds (status keeps 16): the last rounds
    of a small model bounce from round to round, and their mean says more than the last one."""
    recent = (run.get("progress") or {}).get("recent_rounds", [])
    return {e["round"]: e["loss"] for e in recent if e.get("loss") is not None}


def _mean(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
