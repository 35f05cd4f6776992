"""streaming_overlap.py's daemon arms: W real daemons (processes on loopback), each sending
everything through its own shaped uplink (the hidden `--uplink-mbit`: node/net/uplink.py).

Arms, on fresh daemons each, one after another (the same machine load for all):
  local    every daemon trains alone in a run of its own (no communication: the floor);
  diloco   one run of all W, the whole model's update every H steps (the plain driver);
  stream   one run of all W with P fragments, τ steps of overlap (the Streaming driver).
Each member's `status` gives its totals (group/progress.py timing): inner steps, seconds
of torch work, wall seconds from each round's first inner step to its agreement. Wall time per
100 inner steps and the idle fraction (1 − compute/wall) are means over the members.
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all


def _spec(args, *, members: int, extra: dict) -> dict:
    return {
        "model": "gpt",
        "model_settings": {"n_layer": args.layers, "n_embd": args.width, "n_head": 4},
        "dataset": "text",
        "dataset_settings": {"max_bytes": args.max_bytes},
        "codec": args.codec,
        "inner_steps": args.h,
        "rounds": args.steps // args.h,
        "batch_size": args.batch_size,
        "round_timeout": 300.0,
        "min_members": members,
        "num_shards": args.workers,
        **extra,
    }


POLL = 0.5  # status polls, seconds: round ends are timed to this (a round takes ~a minute)


def _create(home: Path, name: str, spec: dict) -> dict:
    """`run create` on the daemon of `home` through its control socket, waiting as long as
    building the model takes on a loaded machine (the CLI waits 60 s)."""
    from peertrain.node.api.control import call_sync
    from peertrain.node.config import NodeConfig

    params = {"name": name, "mode": "diloco", "spec": spec}
    return call_sync(NodeConfig(home=home).control_socket, "run.create", params, timeout=600)


def _start(home: Path, args_: list[str]) -> DaemonProcess:
    return DaemonProcess(home, args_, DAEMON_ENV).start()


def _group(base: Path, args, name: str, extra: dict, daemons: list[DaemonProcess]) -> None:
    """W daemons in one run of `name` (the first creates it, the others join it)."""
    shape = ["--uplink-mbit", str(args.mbit)]
    daemons.append(_start(base / "n0", node_args(extra=shape)))
    addr = daemons[0].wait_ready()["share"]
    _create(daemons[0].home, name, _spec(args, members=args.workers, extra=extra))
    for i in range(1, args.workers):
        join = ["join", addr, "--run", name, "--listen", "/ip4/127.0.0.1/tcp/0", *shape]
        daemons.append(_start(base / f"n{i}", [*join, "--log-format", "json"]))
    for daemon in daemons[1:]:
        daemon.wait_ready()


def _alone(base: Path, args, daemons: list[DaemonProcess]) -> None:
    """W daemons, each training in a run of its own."""
    for i in range(args.workers):
        daemons.append(_start(base / f"n{i}", node_args(extra=["--uplink-mbit", str(args.mbit)])))
    for daemon in daemons:
        daemon.wait_ready()
    spec = _spec(args, members=1, extra={})
    with ThreadPoolExecutor(len(daemons)) as pool:  # at once: each builds while others do
        list(pool.map(lambda i: _create(daemons[i].home, f"local-{i}", spec), range(len(daemons))))


def _finished(daemons: list[DaemonProcess], timeout: float) -> tuple[list[dict], list[list]]:
    """The members' last status once all finished, and each one's round ends as seen polling:
    (seconds, rounds completed, inner steps timed) whenever the count of rounds moved."""
    deadline = time.monotonic() + timeout
    ends: list[list] = [[] for _ in daemons]
    while time.monotonic() < deadline:
        runs = []
        for daemon, seen in zip(daemons, ends, strict=True):
            try:
                run = daemon.status(timeout=10)["run"] or {}
            except Exception:  # noqa: BLE001 - not answering yet: asked again
                run = {}
            runs.append(run)
            done, steps = run.get("rounds_completed"), (run.get("progress") or {}).get("timing")
            if done and steps and (not seen or seen[-1][1] != done):
                seen.append((time.monotonic(), done, steps["steps"]))
        if all(r.get("finished") for r in runs):
            return runs, ends
        time.sleep(POLL)
    raise TimeoutError("the arm did not finish in time")


def _steady_wall(ends: list[list]) -> float | None:
    """Seconds per 100 inner steps from a member's first round end to its last, everything
    included (evaluation, checkpoints, agreement, the next round's start), mean of members:
    what a user waits for, comparable between the drivers whatever each counts as its rounds'
    wall time. None with fewer than two round ends seen."""
    walls = []
    for seen in ends:
        if len(seen) >= 2 and seen[-1][2] > seen[0][2]:
            walls.append((seen[-1][0] - seen[0][0]) * 100 / (seen[-1][2] - seen[0][2]))
    return round(sum(walls) / len(walls), 2) if walls else None


def run_arm(args, name: str, extra: dict | None) -> dict:
    """One arm on fresh daemons: `extra` None is the local arm, else the shared run's flags."""
    with tempfile.TemporaryDirectory(prefix="overlap-") as tmp:
        daemons: list[DaemonProcess] = []  # filled as they start: all are stopped, whatever fails
        try:
            if extra is None:
                _alone(Path(tmp), args, daemons)
            else:
                _group(Path(tmp), args, name, extra, daemons)
            runs, ends = _finished(daemons, args.timeout)
        finally:
            stop_all(daemons)
    timings = [r["progress"]["timing"] for r in runs]
    walls = [t["wall_s"] * 100 / t["steps"] for t in timings]
    checksums = {r["state_checksum"] for r in runs}
    if extra is not None and len(checksums) != 1:
        raise AssertionError(f"{name}: members ended with different states {checksums}")
    streaming = runs[0].get("streaming") or {}
    return {
        "arm": name,
        "wall_per_100_steps": round(sum(walls) / len(walls), 2),
        "steady_wall_per_100_steps": _steady_wall(ends),
        "idle_fraction": round(sum(t["idle_fraction"] for t in timings) / len(timings), 4),
        "steps": timings[0]["steps"],
        "bytes_published": sum(r["bytes_published"] for r in runs),
        "fragment_states": [f["checksum"] for f in streaming.get("fragment_states", [])],
        "loss": runs[0]["loss"],
        "idle_by_cause": _idle_by_cause(runs),
    }


def _idle_by_cause(runs: list[dict]) -> dict[str, float]:
    """Streaming arms: where compute waited, seconds per member (means): `late` for an
    exchange past its τ steps (`drain` of it: still in flight at a round's end, the run's last
    included), `send` for a full outbox, `handoff` for the driver still agreeing on the last
    round's end; `agree` is the driver's time on round ends while compute went on."""
    loops = [(r.get("streaming") or {}).get("loop") for r in runs]
    if not all(loops):
        return {}
    keys = ("late_s", "drain_s", "send_s", "handoff_s", "agree_s")
    return {k: round(sum(loop.get(k, 0.0) for loop in loops) / len(loops), 2) for k in keys}


def daemon_arms(args) -> list[dict]:
    stream = {"fragments": args.fragments, "overlap": args.overlap}
    arms = [
        ("local", None),
        ("diloco", {}),
        (f"stream-P{args.fragments}T{args.overlap}", stream),
    ]
    return [run_arm(args, name, extra) for name, extra in arms]
