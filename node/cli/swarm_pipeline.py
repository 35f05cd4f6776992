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
The supervisor is local_swarm.py; the report's figures and the lines are
swarm_pipeline_report.py.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..errors import NodeError
from .local_swarm import isolation
from .processes import DaemonProcess, node_args
from .swarm_pipeline_report import line, pipeline_report, summarise

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
    """The `swarm` mode (a `SwarmMode`): stage server and trainer daemons."""

    live_table = False

    def __init__(self, options: PipelineLocalOptions, base: Path, console) -> None:
        self.options, self.base, self.console = options, base, console
        self.poll_interval = options.poll_interval
        self.daemons: list[DaemonProcess] = []
        self.roles: list[dict[str, Any]] = []
        self.killed: dict[str, Any] | None = None
        self.stage_sizes: list[dict[str, Any]] = []
        self.started_wall = time.time()  # `moves` in the report are timed from here
        self.statuses: list[dict[str, Any] | None] = []
        self.last_good: list[dict[str, Any] | None] = []
        self.swarm_t0: float | None = None  # elapsed seconds when every trainer was in SWARM

    def header(self) -> dict[str, Any]:
        opts = self.options
        return {
            "mode": "swarm",
            "nodes": opts.nodes,
            "stages": opts.stages,
            "trainers": opts.trainers,
            "speeds": list(opts.speeds),
        }

    def start(self) -> None:
        opts = self.options
        first = self._start_daemons()
        plan = opts.server_plan()
        self.roles = [{"role": "server", "stage": s, "speed": v} for s, v in plan]
        self.roles += [{"role": "trainer"}] * opts.trainers
        created = call_sync(
            first.control_socket,
            "run.create",
            {
                "name": isolation().run_name,
                "mode": "swarm",
                "spec": opts.run_spec(),
                **self.roles[0],
            },
            timeout=120,
        )
        self.console.print(
            f"created swarm run [bold]{isolation().run_name}[/] ({created['run_id'][:16]}…) "
            "on node 0"
        )
        self._wait_connected()
        with ThreadPoolExecutor(max_workers=8) as pool:  # servers join together (stages are dealt)
            list(pool.map(self._join, range(1, opts.nodes)))
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._join, range(opts.nodes, len(self.daemons))))
        self._wait_started()

    def _start_daemons(self) -> DaemonProcess:
        """Node 0, then every other daemon bootstrapping from it; node 0."""
        opts = self.options
        first = DaemonProcess(self.base / "node0", node_args(), isolation().env).start()
        self.daemons = [first]
        addr = first.wait_ready()["share"]
        self.daemons += [
            DaemonProcess(
                self.base / f"node{i}", node_args(bootstrap=[addr]), isolation().env
            ).start()
            for i in range(1, opts.nodes + opts.trainers)
        ]
        for daemon in self.daemons[1:]:
            daemon.wait_ready(timeout=60)
        return first

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
            {"name": isolation().run_name, "timeout": 60, **self.roles[index]},
            timeout=120,
        )
        role = self.roles[index]
        tail = f" stage {role['stage']} speed {role['speed']:g}" if role["role"] == "server" else ""
        self.console.print(f"node {index} joined as {role['role']}{tail}")

    def poll(self) -> list[dict[str, Any] | None]:
        # down, busy, or not in the run yet: the next poll asks again
        statuses = (daemon.status_or_none(timeout=5.0) for daemon in self.daemons)
        return [(status or {}).get("run") for status in statuses]

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

    # --- watch -----------------------------------------------------------------------------
    def step(self, elapsed: float) -> bool:
        """Poll; `--kill-at` and `--duration` count from the start of the SWARM phase (after
        the static baseline)."""
        opts = self.options
        statuses = self.statuses = self.poll()
        self.last_good = [
            s or old for s, old in zip(statuses, self.last_good or statuses, strict=True)
        ]
        self.record_sizes(statuses, elapsed)
        trainers = [s for s in statuses[opts.nodes :] if s]
        in_swarm = len(trainers) == opts.trainers and all(
            t.get("phase") in ("swarm", "finished") for t in trainers
        )
        if self.swarm_t0 is None and in_swarm:
            self.swarm_t0 = elapsed
        phase_s = elapsed - self.swarm_t0 if self.swarm_t0 is not None else 0.0
        if self.swarm_t0 is not None and self.killed is None and opts.kill_at is not None:
            if phase_s >= opts.kill_at:
                self.kill_one(statuses, elapsed)
        finished = len(trainers) == opts.trainers and all(t.get("finished") for t in trainers)
        return finished or bool(
            opts.duration and self.swarm_t0 is not None and phase_s >= opts.duration
        )

    def line(self, elapsed: float) -> str:
        return line(elapsed, self.statuses, self.options.nodes)

    def table(self) -> None:
        return None  # lines only: a pipeline's daemons are many, and the lines say enough

    # --- report ----------------------------------------------------------------------------
    def conclude(self) -> None:
        """Nothing to ask: the trainers' and servers' statuses say everything."""

    def report(self) -> dict[str, Any]:
        return pipeline_report(self, self.last_good)

    def summarise(self, console, report: dict[str, Any]) -> None:
        summarise(console, report)

    def succeeded(self, report: dict[str, Any]) -> bool:
        killed = (self.killed or {}).get("node")
        codes = report["exit_codes"]
        clean = all(code in (0, None) for i, code in enumerate(codes) if i != killed)
        return clean and report.get("samples", 0) > 0 and not report.get("interrupted")


def pipeline_options(args, spec: dict[str, Any]) -> PipelineLocalOptions:
    """The options of `--mode swarm` from the command line (`spec`: its run settings)."""
    try:
        speeds = tuple(float(v) for v in str(args.speeds).split(",") if v.strip())
    except ValueError:
        raise NodeError(f"--speeds {args.speeds!r}: expected numbers like 1,2,4") from None
    return PipelineLocalOptions(
        nodes=args.nodes,
        stages=int(spec.pop("stages", 3)),
        trainers=args.trainers,
        speeds=speeds,
        duration=args.duration,
        kill_at=args.kill_at,
        report=args.report,
        spec=spec,
    )
