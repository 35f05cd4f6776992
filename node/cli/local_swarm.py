"""`peertrain swarm local`: N daemons on loopback as separate processes, watched live.

Every daemon bootstraps from the first one only; peer exchange then meshes the swarm, as it
would on the internet. With `--mode diloco` the first daemon creates a run through its control
API and the others start as `peertrain join <first> --run local`, exactly the commands a user
types. The supervisor polls each daemon's `status` (the same call a user makes), shows a live
table, optionally kills and restarts members (`--kill-every`), and on exit or Ctrl-C stops
every daemon it started. The report (`--report FILE`) is JSON. `--mode swarm` (a SWARM
pipeline: stage servers and trainers) has its own supervisor in node/cli/pipeline_local.py.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..errors import ControlError
from .processes import DaemonProcess, node_args, stop_all

RUN_NAME = "local"
JOIN_TAIL = ["--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]
# one torch thread per daemon: N daemons on a few cores must not oversubscribe them
DAEMON_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSwarmOptions:
    nodes: int = 4
    duration: float = 0.0  # 0: until Ctrl-C (or, training, until the run finishes)
    report: Path | None = None
    poll_interval: float = 2.0
    mode: str = "none"
    spec: dict[str, Any] = field(default_factory=dict)
    kill_every: float = 0.0
    byzantine: int = 0  # the last K members send attacked updates
    attack: str = "sign-flip"
    seed: int = 0


class LocalSwarm:
    def __init__(self, options: LocalSwarmOptions, base: Path, console):
        self.options, self.base, self.console = options, base, console
        self.daemons: list[DaemonProcess] = []
        self.first_addr = ""
        self.kills = 0
        self.last_status: list[dict[str, Any] | None] = []
        self.bytes_of_killed = 0
        self.killed: set[int] = set()  # killed by us, waiting for their restart
        self.died: dict[int, dict[str, Any]] = {}  # died by themselves: exit code, log tail
        self.kills_stopped = False  # the run finished: no more kills
        self.statuses: list[dict[str, Any] | None] = []  # the latest poll, for a report at any time
        self.mesh_s: float | None = None
        self._rng = random.Random(options.seed)

    @property
    def training(self) -> bool:
        return self.options.mode == "diloco"

    def start(self) -> None:
        first = DaemonProcess(self.base / "node0", node_args(), DAEMON_ENV).start()
        self.daemons.append(first)
        status = first.wait_ready()
        self.first_addr = status["share"]
        self._started(0, status)
        if self.training:
            spec = {"min_members": self.options.nodes, **self.options.spec}
            created = call_sync(
                first.control_socket,
                "run.create",
                {"name": RUN_NAME, "mode": "diloco", "spec": spec},
                timeout=120,
            )
            self.console.print(
                f"created run [bold]{RUN_NAME}[/] ({created['run_id'][:16]}…) on node 0"
            )
        for index in range(1, self.options.nodes):
            byzantine = index >= self.options.nodes - self.options.byzantine
            args = self._member_args() + (["--attack", self.options.attack] if byzantine else [])
            daemon = DaemonProcess(self.base / f"node{index}", args, DAEMON_ENV).start()
            self.daemons.append(daemon)
            self._started(index, daemon.wait_ready())

    def _member_args(self) -> list[str]:
        if self.training:
            return ["join", self.first_addr, "--run", RUN_NAME, *JOIN_TAIL]
        return node_args(bootstrap=[self.first_addr])

    def _started(self, index: int, status: dict[str, Any]) -> None:
        byzantine = index >= self.options.nodes - self.options.byzantine and index > 0
        tag = f" [red](Byzantine: {self.options.attack})[/]" if byzantine else ""
        self.console.print(
            f"started node {index}: [bold]{status['name']}[/] {status['share']}{tag}"
        )

    def poll(self) -> list[dict[str, Any] | None]:
        statuses = []
        for daemon in self.daemons:
            status = None
            if daemon.alive():
                try:
                    status = daemon.status(timeout=3.0)
                except ControlError:
                    pass
            statuses.append(status)
        self.last_status = [
            s or old for s, old in zip(statuses, self.last_status or statuses, strict=True)
        ]
        return statuses

    def notice_deaths(self) -> list[int]:
        """Daemons that exited without us killing them: recorded once, never restarted."""
        new = []
        for index, daemon in enumerate(self.daemons):
            if index in self.killed or index in self.died or daemon.alive():
                continue
            code = daemon.process.poll() if daemon.process else None
            tail = daemon.log_path.read_text(errors="replace").splitlines()[-12:]
            error = next(
                (line for line in reversed(tail) if "Error" in line), tail[-1] if tail else ""
            )
            self.died[index] = {"node": index, "exit_code": code, "error": error.strip()[:400]}
            new.append(index)
        return new

    def kill_one(self) -> int | None:
        if self.kills_stopped:
            return None
        candidates = [
            i for i, d in enumerate(self.daemons) if i > 0 and d.alive() and i not in self.died
        ]
        if not candidates:
            return None
        index = self._rng.choice(candidates)
        last = self.last_status[index] if index < len(self.last_status) else None
        if last and last.get("run"):
            self.bytes_of_killed += last["run"].get("bytes_fetched", 0)
        self.killed.add(index)
        self.daemons[index].stop(signal.SIGKILL)
        self.kills += 1
        return index

    def restart(self, index: int) -> None:
        self.daemons[index].start()
        self.daemons[index].wait_ready()
        self.killed.discard(index)

    def finished(self, statuses: list[dict[str, Any] | None]) -> bool:
        """Every daemon still in the swarm (not dead by itself) finished the run. Once one
        has, kills stop: the end of a run is not the time to inject churn."""
        if not self.training or not self.options.spec.get("rounds"):
            return False
        runs = [s["run"] for s in statuses if s and s.get("run")]
        if any(r.get("finished") for r in runs):
            self.kills_stopped = True
        members = [i for i in range(len(self.daemons)) if i not in self.died]
        in_run = [statuses[i]["run"] for i in members if statuses[i] and statuses[i].get("run")]
        return len(in_run) == len(members) > 0 and all(r["finished"] for r in in_run)


def run_swarm_pipeline(args, spec: dict[str, Any]) -> int:
    """`--mode swarm`: a SWARM pipeline run of daemon processes (node/cli/pipeline_local.py)."""
    from ..errors import NodeError
    from .pipeline_local import PipelineLocalOptions, run_pipeline_local

    try:
        speeds = tuple(float(v) for v in str(args.speeds).split(",") if v.strip())
    except ValueError:
        raise NodeError(f"--speeds {args.speeds!r}: expected numbers like 1,2,4") from None
    options = PipelineLocalOptions(
        nodes=args.nodes,
        stages=int(spec.pop("stages", 3)),
        trainers=args.trainers,
        speeds=speeds,
        duration=args.duration,
        kill_at=args.kill_at,
        report=args.report,
        spec=spec,
    )
    return run_pipeline_local(options)


def run_local_swarm(options: LocalSwarmOptions) -> int:
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    started = time.monotonic()
    report: dict[str, Any] = {"nodes": options.nodes, "mode": options.mode}
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM, like Ctrl-C, reports first
    with tempfile.TemporaryDirectory(prefix="peertrain-swarm-") as base:
        swarm = LocalSwarm(options, Path(base), console)
        try:
            swarm.start()
            report["startup_s"] = round(time.monotonic() - started, 2)
            _watch(console, swarm)
            if swarm.training:
                report["sample"] = _sample(swarm)
        except KeyboardInterrupt:
            console.print("interrupted: stopping the swarm and writing what happened so far")
            report["interrupted"] = True
        finally:
            signal.signal(signal.SIGTERM, previous)
            report.update(_swarm_report(swarm))
            report["exit_codes"] = stop_all(swarm.daemons)
        report["total_s"] = round(time.monotonic() - started, 2)
    _summarise(console, report)
    if options.report:
        options.report.write_text(json.dumps(report, indent=2))
    return _exit_status(swarm, report)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _swarm_report(swarm: LocalSwarm) -> dict[str, Any]:
    statuses = swarm.statuses
    training = _training_report(swarm, statuses) if swarm.training and statuses else {}
    return {
        "mesh_s": swarm.mesh_s,
        "kills": swarm.kills,
        "died": sorted(swarm.died.values(), key=lambda d: d["node"]),
        **training,
        "final": [_brief(s) for s in statuses],
    }


def _exit_status(swarm: LocalSwarm, report: dict[str, Any]) -> int:
    """Non-zero when a daemon died by itself, one did not stop cleanly, or nothing happened."""
    clean = all(code in (0, None) for code in report["exit_codes"])
    ok = (
        report.get("rounds_completed", 0) > 0
        if swarm.training
        else report.get("mesh_s") is not None
    )
    return 0 if clean and ok and not swarm.died and not report.get("interrupted") else 1


def _watch(console, swarm: LocalSwarm) -> None:
    """Poll until the duration ends or the run finishes; kill and restart members if asked."""
    import contextlib

    from rich.live import Live

    options = swarm.options
    t0 = time.monotonic()
    next_kill = t0 + options.kill_every if options.kill_every else None
    restart_at: dict[int, float] = {}
    statuses: list[dict[str, Any] | None] = []
    live = (
        Live(console=console, auto_refresh=False)
        if console.is_terminal
        else contextlib.nullcontext()
    )
    with live:
        while True:
            now = time.monotonic()
            for index, when in list(restart_at.items()):
                if now >= when:
                    swarm.restart(index)
                    del restart_at[index]
            if next_kill is not None and now >= next_kill:
                killed = swarm.kill_one()
                if killed is not None:
                    restart_at[killed] = now + 3.0
                next_kill = now + options.kill_every
            statuses = swarm.statuses = swarm.poll()
            for index in swarm.notice_deaths():
                died = swarm.died[index]
                code, error = died["exit_code"], died["error"]
                console.print(f"[red]node {index} died by itself[/] (exit {code}): {error}")
            if swarm.mesh_s is None and _full_mesh(statuses):
                swarm.mesh_s = round(now - t0, 2)
            if console.is_terminal:
                live.update(_table(statuses, swarm.mesh_s, swarm), refresh=True)
            else:
                console.print(_line(now - t0, statuses, swarm))
            done = swarm.finished(statuses) and not restart_at
            if done or (options.duration and now - t0 >= options.duration):
                break
            time.sleep(options.poll_interval)
    if not console.is_terminal:
        console.print(_table(statuses, swarm.mesh_s, swarm))


def _training_report(swarm: LocalSwarm, statuses: list[dict[str, Any] | None]) -> dict[str, Any]:
    from peertrain.swarm.diloco.traffic import data_parallel_bytes

    honest = len(statuses) - swarm.options.byzantine
    runs = [  # what honest members still in the swarm end with
        s["run"]
        for i, s in enumerate(statuses[:honest])
        if s and s.get("run") and i not in swarm.died
    ]
    if not runs:
        return {"rounds_completed": 0}
    first = runs[0]
    rounds = min(r["round"] for r in runs)
    return {
        "rounds_completed": rounds,
        "initial_loss": first["initial_loss"],
        "final_loss": sum(r["loss"] for r in runs) / len(runs),
        "state_hashes": [r["state_checksum"] for r in runs],
        "bytes_sent": sum(r["bytes_fetched"] for r in runs) + swarm.bytes_of_killed,
        "ddp_bytes": data_parallel_bytes(
            first["params"], steps=rounds * first["inner_steps"], members=len(swarm.daemons)
        ),
        "params": first["params"],
        "resyncs": sum(r["resyncs"] for r in runs),
        "rejected_updates": sum(r["rejected_updates"] for r in runs),
        "byzantine": swarm.options.byzantine,
        "attack": swarm.options.attack if swarm.options.byzantine else None,
    }


def _sample(swarm: LocalSwarm) -> str | None:
    try:
        return call_sync(
            swarm.daemons[0].control_socket,
            "run.sample",
            {"prompt": "def ", "tokens": 200},
            timeout=60,
        )["text"]
    except ControlError:
        return None  # not a text model


def _brief(s: dict[str, Any] | None) -> dict[str, Any] | None:
    if s is None:
        return None
    out = {"name": s["name"], "peer_id": s["peer_id"], "peers": len(s["peers"])}
    if s.get("run"):
        out.update(round=s["run"]["round"], loss=s["run"]["loss"], state=s["run"]["state_checksum"])
    return out


def _full_mesh(statuses: list[dict[str, Any] | None]) -> bool:
    alive = [s for s in statuses if s]
    return len(alive) == len(statuses) and all(len(s["peers"]) >= len(alive) - 1 for s in alive)


def _line(elapsed: float, statuses: list[dict[str, Any] | None], swarm: LocalSwarm) -> str:
    parts = []
    for s in statuses:
        if s is None:
            parts.append("down")
        elif s.get("run"):
            r = s["run"]
            loss = f"{r['loss']:.3f}" if r["loss"] is not None else "-"
            parts.append(f"r{r['round']} {loss}")
        else:
            parts.append(f"{len(s['peers'])} peers")
    return (
        f"[{elapsed:6.1f} s] "
        + " | ".join(parts)
        + (f"  (kills {swarm.kills})" if swarm.kills else "")
    )


def _table(statuses: list[dict[str, Any] | None], mesh_s: float | None, swarm: LocalSwarm):
    from rich.table import Table

    title = (
        f"local swarm: full mesh after {mesh_s:.2f} s"
        if mesh_s is not None
        else "local swarm: connecting…"
    )
    table = Table(title=title)
    columns = ["node", "name", "peers"] + (
        ["round", "loss", "phase", "MB in"] if swarm.training else ["uptime", "address"]
    )
    for column in columns:
        table.add_column(column)
    for index, s in enumerate(statuses):
        if s is None:
            table.add_row(str(index), "[red]down[/]", *["-"] * (len(columns) - 2))
            continue
        row = [str(index), s["name"], str(len(s["peers"]))]
        if swarm.training:
            r = s.get("run") or {}
            loss = f"{r['loss']:.4f}" if r.get("loss") is not None else "-"
            row += [
                str(r.get("round", "-")),
                loss,
                r.get("phase", "joining"),
                f"{r.get('bytes_fetched', 0) / 1e6:.1f}",
            ]
        else:
            row += [f"{s['uptime_s']:.0f} s", s["share"]]
        table.add_row(*row)
    return table


def _summarise(console, report: dict[str, Any]) -> None:
    console.rule("summary")
    mesh = f"{report['mesh_s']:.2f} s" if report.get("mesh_s") is not None else "never"
    console.print(
        f"nodes: {report['nodes']}   started in {report.get('startup_s', '-')} s"
        f"   full mesh after: {mesh}"
    )
    if report.get("rounds_completed") is not None and report["mode"] == "diloco":
        hashes = set(report.get("state_hashes", []))
        console.print(
            f"DiLoCo: {report['rounds_completed']} rounds, "
            f"loss {report.get('initial_loss', 0):.4f} → "
            f"{report.get('final_loss', 0):.4f}; models identical on all nodes: "
            f"{'yes' if len(hashes) == 1 else 'NO'}"
        )
        if report.get("ddp_bytes"):
            ratio = report["ddp_bytes"] / max(1, report["bytes_sent"])
            console.print(
                f"outer-update traffic {report['bytes_sent'] / 1e6:.1f} MB vs data parallel "
                f"{report['ddp_bytes'] / 1e6:.1f} MB ({ratio:.0f}x less); "
                f"kills {report.get('kills', 0)}"
            )
        if report.get("sample"):
            console.rule("sample from the trained model")
            console.print(report["sample"], markup=False, highlight=False)
    for died in report.get("died", []):
        console.print(
            f"[red]node {died['node']} died by itself[/] (exit {died['exit_code']}): "
            f"{died['error']}"
        )
    clean = sum(1 for code in report["exit_codes"] if code == 0)
    console.print(
        f"stopped cleanly: {clean}/{len(report['exit_codes'])}   total {report['total_s']} s"
    )
