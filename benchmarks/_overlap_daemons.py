"""streaming_overlap.py's daemon arms: W real daemons (processes on loopback), each sending
everything through its own shaped uplink (the hidden `--uplink-mbit`: node/net/uplink.py).

Arms, on fresh daemons each, one after another (the same machine load for all):
  local    every daemon trains alone in a run of its own (no communication: the floor);
  diloco   one run of all W, the whole model's update every H steps (the plain driver);
  stream   one run of all W with P fragments, τ steps of overlap (the Streaming driver).
Each member's `status` gives its totals (swarm/diloco/progress.py timing): inner steps, seconds
of torch work, wall seconds from each round's first inner step to its agreement. Wall time per
100 inner steps and the idle fraction (1 − compute/wall) are means over the members.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all


def _run_flags(args, *, members: int, extra: list[str]) -> list[str]:
    settings = {"n_layer": args.layers, "n_embd": args.width, "n_head": 4}
    flags = ["--model", "gpt", "--dataset", "text", "--codec", args.codec]
    flags += ["--inner-steps", str(args.h), "--rounds", str(args.steps // args.h)]
    flags += ["--batch-size", str(args.batch_size), "--round-timeout", "300"]
    flags += ["--min-members", str(members), "--set", f"num_shards={args.workers}"]
    flags += ["--set", f"model_settings={json.dumps(settings)}"]
    return flags + extra


def _create(home: Path, name: str, flags: list[str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "peertrain", "run", "create", "--home", str(home)]
        + ["--name", name, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def _start(home: Path, args_: list[str]) -> DaemonProcess:
    return DaemonProcess(home, args_, DAEMON_ENV).start()


def _group(base: Path, args, name: str, extra: list[str]) -> list[DaemonProcess]:
    """W daemons in one run of `name` (the first creates it, the others join it)."""
    shape = ["--uplink-mbit", str(args.mbit)]
    first = _start(base / "n0", node_args(extra=shape))
    addr = first.wait_ready()["share"]
    _create(first.home, name, _run_flags(args, members=args.workers, extra=extra))
    daemons = [first]
    for i in range(1, args.workers):
        join = ["join", addr, "--run", name, "--listen", "/ip4/127.0.0.1/tcp/0", *shape]
        daemons.append(_start(base / f"n{i}", [*join, "--log-format", "json"]))
    for daemon in daemons[1:]:
        daemon.wait_ready()
    return daemons


def _alone(base: Path, args) -> list[DaemonProcess]:
    """W daemons, each training in a run of its own."""
    daemons = [
        _start(base / f"n{i}", node_args(extra=["--uplink-mbit", str(args.mbit)]))
        for i in range(args.workers)
    ]
    for i, daemon in enumerate(daemons):
        daemon.wait_ready()
        _create(daemon.home, f"local-{i}", _run_flags(args, members=1, extra=[]))
    return daemons


def _finished(daemons: list[DaemonProcess], timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = []
        for daemon in daemons:
            try:
                runs.append(daemon.status(timeout=10)["run"])
            except Exception:  # noqa: BLE001 - not answering yet: asked again
                runs.append({})
        if all(r.get("finished") for r in runs):
            return runs
        time.sleep(2)
    raise TimeoutError("the arm did not finish in time")


def run_arm(args, name: str, extra: list[str] | None) -> dict:
    """One arm on fresh daemons: `extra` None is the local arm, else the shared run's flags."""
    with tempfile.TemporaryDirectory(prefix="overlap-") as tmp:
        daemons = _alone(Path(tmp), args) if extra is None else _group(Path(tmp), args, name, extra)
        try:
            runs = _finished(daemons, args.timeout)
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
        "idle_fraction": round(sum(t["idle_fraction"] for t in timings) / len(timings), 4),
        "steps": timings[0]["steps"],
        "bytes_published": sum(r["bytes_published"] for r in runs),
        "fragment_states": [f["checksum"] for f in streaming.get("fragment_states", [])],
        "loss": runs[0]["loss"],
    }


def daemon_arms(args) -> list[dict]:
    stream = ["--fragments", str(args.fragments), "--overlap", str(args.overlap)]
    arms = [
        ("local", None),
        ("diloco", []),
        (f"stream-P{args.fragments}T{args.overlap}", stream),
    ]
    return [run_arm(args, name, extra) for name, extra in arms]
