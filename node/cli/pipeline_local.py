"""`peertrain swarm local --mode swarm`: a SWARM pipeline run of real daemon processes on loopback.

    peertrain swarm local --mode swarm --nodes 6 --stages 3 --trainers 2 --speeds 1,2,4 \
        --kill-at 10 --duration 30 --report report.json

`--nodes` stage servers and `--trainers` trainers, each a `peertrain node start` process (one
torch thread each). Node 0 creates the run (`run.create`, mode swarm) and serves; the other
servers and the trainers join it through their control API (`run.join` with a role), as
`peertrain run join --name local --role …` would. Servers are dealt round-robin over the stages
and `--speeds` is cycled over them, exactly as the in-process `run_local` does, so both report the
same quantities for the same flags (with `--speeds 1,2,4` and 3 stages, each stage gets servers of
one speed: the heterogeneous case rebalancing exists for). `--speeds` needs `base_seconds` > 0
(default here 2 ms per forward sample at speed 1) to mean anything: servers pad each call to
`base_seconds · work / speed`.

The report (JSON): `throughput` (trainers' samples/s in the SWARM phase), `ideal_throughput`
(min over stages of Σ its servers' capacities / the stage's demand, capacities from `--speeds`
and `base_seconds`: what the padded servers could do on an idle machine),
`final_ideal_throughput` (the same for the layout at the end: after rebalancing moves and a kill),
`measured_ideal_throughput` (that from the throughputs servers measured and announced, at
the end, i.e. with the machine's real contention),
`static_throughput` (a fixed one-server-per-stage pipeline measured by the same trainers in the
same processes during the first `static_seconds` of the run, before the SWARM phase: no second
start-up, the same conditions), `lost_microbatches`, `retries`, `initial_loss`, `final_loss`
(training loss of the first / last microbatches), `stage_sizes` over time (polled once training
runs), `moves` (every rebalancing move, timed from the supervisor's start), and the kill.
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..errors import ControlError, NodeError
from .processes import DaemonProcess, node_args, stop_all

RUN_NAME = "local"
DAEMON_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
DEFAULT_SPEC = {"base_seconds": 0.002, "static_seconds": 4.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineLocalOptions:
    nodes: int = 6  # stage servers
    stages: int = 3
    trainers: int = 2
    speeds: tuple[float, ...] = (1.0,)
    duration: float = 30.0  # seconds of the SWARM phase; 0: until the run finishes
    kill_at: float | None = None  # seconds into the SWARM phase: SIGKILL a server of stage 1
    report: Path | None = None
    poll_interval: float = 1.0
    spec: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stages < 2 or self.nodes < self.stages or self.trainers < 1:
            raise NodeError(
                "--mode swarm needs --stages ≥ 2, --nodes ≥ --stages and --trainers ≥ 1"
            )
        if not self.speeds or min(self.speeds) <= 0:
            raise NodeError("--speeds must be positive numbers")

    def run_spec(self) -> dict[str, Any]:
        return {**DEFAULT_SPEC, **self.spec, "stages": self.stages}

    def server_plan(self) -> list[tuple[int, float]]:
        """(stage, speed) of server i: round-robin over stages, speeds cycled (as run_local)."""
        return [(i % self.stages, self.speeds[i % len(self.speeds)]) for i in range(self.nodes)]


class PipelineSwarm:
    def __init__(self, options: PipelineLocalOptions, base: Path, console) -> None:
        self.options, self.base, self.console = options, base, console
        self.daemons: list[DaemonProcess] = []
        self.roles: list[dict[str, Any]] = []
        self.killed: dict[str, Any] | None = None
        self.stage_sizes: list[dict[str, Any]] = []
        self.started_wall = (
            time.time()
        )  # `moves` in the report are timed from here (servers' clocks)

    def start(self) -> None:
        opts = self.options
        first = DaemonProcess(self.base / "node0", node_args(), DAEMON_ENV).start()
        addr = first.wait_ready()["share"]
        self.daemons = [first] + [
            DaemonProcess(self.base / f"node{i}", node_args(bootstrap=[addr]), DAEMON_ENV).start()
            for i in range(1, opts.nodes + opts.trainers)
        ]
        for daemon in self.daemons[1:]:
            daemon.wait_ready(timeout=60)
        plan = opts.server_plan()
        self.roles = [{"role": "server", "stage": s, "speed": v} for s, v in plan]
        self.roles += [{"role": "trainer"}] * opts.trainers
        created = call_sync(
            first.control_socket,
            "run.create",
            {"name": RUN_NAME, "mode": "swarm", "spec": opts.run_spec(), **self.roles[0]},
            timeout=120,
        )
        self.console.print(
            f"created swarm run [bold]{RUN_NAME}[/] ({created['run_id'][:16]}…) on node 0"
        )
        self._wait_connected()
        with ThreadPoolExecutor(max_workers=8) as pool:  # servers join together (stages are dealt)
            list(pool.map(self._join, range(1, opts.nodes)))
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._join, range(opts.nodes, len(self.daemons))))
        self._wait_started()

    def _wait_started(self, timeout: float = 120.0) -> None:
        """Until every daemon's run has left "starting" (torch imported, stage state fetched)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(run and run.get("phase") != "starting" for run in self.poll()):
                return
            time.sleep(0.5)
        raise NodeError(f"the swarm run did not start on every daemon within {timeout:.0f} s")

    def _wait_connected(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(d.status(timeout=5)["peers"] for d in self.daemons[1:]):
                return
            time.sleep(0.2)
        raise NodeError("daemons did not connect to node 0")

    def _join(self, index: int) -> None:
        call_sync(
            self.daemons[index].control_socket,
            "run.join",
            {"name": RUN_NAME, "timeout": 60, **self.roles[index]},
            timeout=120,
        )
        role = self.roles[index]
        tail = f" stage {role['stage']} speed {role['speed']:g}" if role["role"] == "server" else ""
        self.console.print(f"node {index} joined as {role['role']}{tail}")

    def poll(self) -> list[dict[str, Any] | None]:
        out = []
        for daemon in self.daemons:
            run = None
            if daemon.alive():
                try:
                    run = daemon.status(timeout=5.0)["run"]
                except (ControlError, KeyError):
                    pass
            out.append(run)
        return out

    def kill_one(self, statuses: list[dict[str, Any] | None], elapsed: float) -> None:
        for index in range(1, self.options.nodes):
            run = statuses[index]
            if (
                run
                and run.get("role") == "server"
                and run.get("stage") == 1
                and self.daemons[index].alive()
            ):
                self.daemons[index].stop(signal.SIGKILL)
                done = sum((r or {}).get("completed", 0) for r in statuses[self.options.nodes :])
                self.killed = {
                    "node": index,
                    "stage": 1,
                    "at_s": round(elapsed, 2),
                    "completed_before": done,
                }
                self.console.print(
                    f"[red]killed node {index} (a server of stage 1) at {elapsed:.1f} s[/]"
                )
                return

    def record_sizes(self, statuses: list[dict[str, Any] | None], elapsed: float) -> None:
        sizes = [0] * self.options.stages
        for run in statuses[: self.options.nodes]:
            if run and run.get("role") == "server" and 0 <= run.get("stage", -1) < len(sizes):
                sizes[run["stage"]] += 1
        if not self.stage_sizes or self.stage_sizes[-1]["sizes"] != sizes:
            self.stage_sizes.append({"t": round(elapsed, 2), "sizes": sizes})


def run_pipeline_local(options: PipelineLocalOptions) -> int:
    import sys

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.monotonic()
    report: dict[str, Any] = {
        "mode": "swarm",
        "nodes": options.nodes,
        "stages": options.stages,
        "trainers": options.trainers,
        "speeds": list(options.speeds),
    }
    with tempfile.TemporaryDirectory(prefix="peertrain-pipeline-") as base:
        swarm = PipelineSwarm(options, Path(base), console)
        try:
            swarm.start()
            report["startup_s"] = round(time.monotonic() - started, 2)
            report.update(_watch(console, swarm))
        except KeyboardInterrupt:
            console.print("interrupted: stopping the swarm")
            report["interrupted"] = True
        finally:
            codes = stop_all(swarm.daemons)
            report["exit_codes"] = codes
        report["total_s"] = round(time.monotonic() - started, 2)
    _summarise(console, report)
    if options.report:
        options.report.write_text(json.dumps(report, indent=2))
    killed = (swarm.killed or {}).get("node")
    clean = all(code in (0, None) for i, code in enumerate(report["exit_codes"]) if i != killed)
    return 0 if clean and report.get("samples", 0) > 0 else 1


def _watch(console, swarm: PipelineSwarm) -> dict[str, Any]:
    """Poll until `duration` seconds of the SWARM phase have passed (or the run finished);
    `--kill-at` counts from the start of the SWARM phase too (after the static baseline)."""
    opts = swarm.options
    t0 = time.monotonic()
    swarm_t0: float | None = None
    last_good: list[dict[str, Any] | None] = [None] * len(swarm.daemons)
    while True:
        now = time.monotonic()
        statuses = swarm.poll()
        last_good = [s or old for s, old in zip(statuses, last_good, strict=True)]
        swarm.record_sizes(statuses, now - t0)
        trainers = [s for s in statuses[opts.nodes :] if s]
        in_swarm = len(trainers) == opts.trainers and all(
            t.get("phase") in ("swarm", "finished") for t in trainers
        )
        if swarm_t0 is None and in_swarm:
            swarm_t0 = now
        phase_s = now - swarm_t0 if swarm_t0 is not None else 0.0
        if (
            opts.kill_at is not None
            and swarm.killed is None
            and swarm_t0 is not None
            and phase_s >= opts.kill_at
        ):
            swarm.kill_one(statuses, now - t0)
        console.print(_line(now - t0, statuses, opts.nodes))
        finished = len(trainers) == opts.trainers and all(t.get("finished") for t in trainers)
        if finished or (opts.duration and swarm_t0 is not None and phase_s >= opts.duration):
            break
        time.sleep(opts.poll_interval)
    return _report(swarm, last_good)


def _report(swarm: PipelineSwarm, runs: list[dict[str, Any] | None]) -> dict[str, Any]:
    opts = swarm.options
    servers = [r for r in runs[: opts.nodes] if r]
    alive = [
        r for i, r in enumerate(runs[: opts.nodes]) if r and i != (swarm.killed or {}).get("node")
    ]
    trainers = [r for r in runs[opts.nodes :] if r]
    spec = (trainers or servers or [{}])[0].get("spec", {})
    demand = spec.get("demand") or [1.0] * opts.stages
    capacity = [
        sum(r["throughput"] for r in alive if r["stage"] == s) / demand[s]
        for s in range(opts.stages)
    ]
    base = spec.get("base_seconds", 0.0)

    def nominal(layout: list[tuple[int, float]]) -> float | None:
        """Σ of the slowest stage's server capacities, from speeds and base_seconds."""
        if not base:
            return None
        return min(
            sum(v for s, v in layout if s == stage) / (demand[stage] * base)
            for stage in range(opts.stages)
        )

    initial = nominal(opts.server_plan())
    statics = [t["static"]["throughput"] for t in trainers if t.get("static")]

    def mean(key: str) -> float | None:
        values = [t[key] for t in trainers if t.get(key) is not None]
        return sum(values) / len(values) if values else None

    return {
        "throughput": sum(
            t["swarm_samples"] / t["swarm_seconds"] for t in trainers if t.get("swarm_seconds")
        ),
        "ideal_throughput": initial
        if initial is not None
        else (min(capacity) if capacity else None),
        "final_ideal_throughput": nominal([(r["stage"], r["speed"]) for r in alive]),
        "measured_ideal_throughput": min(capacity) if capacity else None,
        "static_throughput": sum(statics) if len(statics) == len(trainers) and statics else None,
        "lost_microbatches": sum(t["lost_microbatches"] for t in trainers),
        "retries": sum(t["retries"] for t in trainers),
        "completed": sum(t["completed"] for t in trainers),
        "samples": sum(t["samples"] for t in trainers),
        "initial_loss": mean("initial_loss"),
        "final_loss": mean("loss"),
        "stage_sizes": swarm.stage_sizes,
        "moves": sorted(
            (
                {
                    "node": i,
                    "t": round(m["at"] - swarm.started_wall, 2),
                    "from": m["from"],
                    "to": m["to"],
                }
                for i, r in enumerate(runs[: opts.nodes])
                if r
                for m in r.get("moves", [])
            ),
            key=lambda m: m["t"],
        ),
        "killed": swarm.killed,
        "servers": [
            {
                "stage": r["stage"],
                "speed": r["speed"],
                "throughput": r["throughput"],
                "calls": r["calls"],
                "steps": r["steps"],
                "moves": len(r["moves"]),
                "resyncs": r.get("resyncs", 0),
            }
            for r in servers
        ],
    }


def _line(elapsed: float, statuses: list[dict[str, Any] | None], nodes: int) -> str:
    parts = []
    for index, run in enumerate(statuses):
        if run is None:
            parts.append("down")
        elif index < nodes:
            parts.append(f"s{run.get('stage', '?')}:{run.get('calls', 0)}")
        else:
            loss = run.get("loss")
            parts.append(
                f"T {run.get('phase', '?')[:6]} {run.get('completed', 0)} {loss:.3f}"
                if loss is not None
                else f"T {run.get('phase', '?')[:6]}"
            )
    return f"[{elapsed:6.1f} s] " + " | ".join(parts)


def _summarise(console, report: dict[str, Any]) -> None:
    console.rule("summary")

    def fmt(value: Any, digits: int = 1) -> str:
        return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"

    console.print(
        f"servers {report['nodes']} over {report['stages']} stages, trainers {report['trainers']}, "
        f"started in {report.get('startup_s', '-')} s, total {report.get('total_s')} s"
    )
    if "throughput" in report:
        console.print(
            f"throughput {fmt(report['throughput'])} samples/s; "
            f"ideal {fmt(report['ideal_throughput'])} (from measured capacities at the end "
            f"{fmt(report['measured_ideal_throughput'])}); "
            f"static {fmt(report['static_throughput'])}"
        )
        console.print(
            f"loss {fmt(report['initial_loss'], 3)} → {fmt(report['final_loss'], 3)}; "
            f"lost microbatches {report['lost_microbatches']} (retries {report['retries']}); "
            f"stage sizes {[s['sizes'] for s in report['stage_sizes']]}"
        )
