"""One-off events of a local DiLoCo swarm (swarm_mesh.py), for a run told end to end: a member
SIGKILLed at a chosen time and restarted (`--kill-at`), one more daemon that joins late
(`--late-join`), and the model exported when the run ends (`--export DIR`).

What a catch-up cost is read from the members' own logs, over all their lives: every state
download a daemon finishes logs one `download_done` event (swarm/diloco/group/adoption.py) with
its bytes, seconds, rate and donors, and the round it caught up from. `catch_ups` lists them.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from .local_swarm import isolation

MB = 1 << 20
FROM_ROUND = re.compile(r"state of round (\d+)(?: \(catching up from round (\d+)\))?")
EXPORT_TIMEOUT = 600.0  # s: a 30M-parameter model's export on a loaded machine


class OneOffEvents:
    """`--kill-at` and `--late-join` of one MeshSwarm, each done once when its time comes."""

    def __init__(self, swarm) -> None:
        self.swarm = swarm
        self.killed: dict[str, Any] | None = None  # {"node", "at_s"}
        self.late: dict[str, Any] | None = None  # {"node", "at_s"}

    @property
    def pending(self) -> bool:
        """An event still to come: the run is not over before it (nobody would see it)."""
        options = self.swarm.options
        return (options.kill_at is not None and self.killed is None) or (
            options.late_join is not None and self.late is None
        )

    def step(self, elapsed: float) -> None:
        options, swarm = self.swarm.options, self.swarm
        if options.kill_at is not None and self.killed is None and elapsed >= options.kill_at:
            # one of the members the run started with: the late joiner has its own test of
            # catching up (a 25M run killed it a minute after it joined, and neither was seen)
            index = swarm.kill_one(among=range(1, options.nodes))
            if index is not None:  # else asked again at the next poll
                swarm.restart_later(index)
                self.killed = {"node": index, "at_s": round(elapsed, 1)}
                swarm.console.print(f"killed node {index} at {elapsed:.0f} s (--kill-at)")
        creator = ((swarm.statuses[0] if swarm.statuses else None) or {}).get("run") or {}
        if (
            options.late_join is not None
            and self.late is None
            and options.late_join.due(elapsed, creator.get("round"))
        ):
            index = swarm.add_member()
            self.late = {"node": index, "at_s": round(elapsed, 1), "round": creator.get("round")}
            swarm.console.print(f"node {index} joins late, at {elapsed:.0f} s (--late-join)")

    def report(self) -> dict[str, Any]:
        return {"kill_at": self.killed, "late_join": self.late}


def catch_ups(daemons) -> list[dict[str, Any]]:
    """Every state download the daemons' logs record, oldest first within each daemon."""
    return [
        _catch_up(index, fields)
        for index, daemon in enumerate(daemons)
        for fields in log_events(daemon.log_path, "download_done")
    ]


def log_events(path: Path, event: str) -> list[dict[str, Any]]:
    """The fields of every `event` a daemon's JSON log holds, over all its lives."""
    if not path.exists():
        return []
    out = []
    marker = f'"event": "{event}"'
    for line in path.read_text(errors="replace").splitlines():
        if marker not in line:
            continue
        try:  # the event's fields sit beside msg (node/log_setup.py)
            out.append(json.loads(line))
        except ValueError:  # a line cut by a SIGKILL
            continue
    return out


def _catch_up(index: int, fields: dict[str, Any]) -> dict[str, Any]:
    if "round" in fields:  # the event's own fields (older daemons said it in `what` alone)
        round_, since = fields["round"], fields.get("from_round")
    else:
        found = FROM_ROUND.search(str(fields.get("what", "")))
        round_ = int(found.group(1)) if found else None
        since = int(found.group(2)) if found and found.group(2) else None
    return {
        "node": index,
        "round": round_,
        "rounds_missed": round_ - since if round_ is not None and since is not None else None,
        "mb": round(fields.get("bytes_done", 0) / MB, 1),
        "seconds": fields.get("elapsed_s"),
        "mb_per_s": round(fields.get("bytes_per_s", 0) / MB, 1),
        "donors": fields.get("donors"),
    }


def export(swarm, out: Path, form: str) -> dict[str, Any]:
    """The run's model as node 0 holds it at the end, written to `out` (`run export`)."""
    params = {"run": isolation().run_name, "out": str(out), "format": form}
    started = time.monotonic()
    try:
        result = call_sync(
            swarm.daemons[0].control_socket, "run.export", params, timeout=EXPORT_TIMEOUT
        )
    except Exception as exc:  # noqa: BLE001 - reported, the run's own outcome stands
        return {"error": str(exc)[:400], "out": str(out), "format": form}
    return {
        "out": str(out),
        "format": form,
        "round": result.get("round"),
        "files": result.get("files"),
        "seconds": round(time.monotonic() - started, 1),
    }
