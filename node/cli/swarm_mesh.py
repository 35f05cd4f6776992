"""`peertrain swarm local --mode none | diloco`: daemons that mesh, and optionally train DiLoCo.

Every daemon bootstraps from the first one only; peer exchange then meshes the swarm, as it
would on the internet. With `--mode diloco` the first daemon creates a run through its control
API and the others start as `peertrain join <first> --run local`, exactly the commands a user
types; the last `--hostile` K of them run an attack (`--attack a,b`: cycled over them), on their
updates or on state agreement. In an invite run (`--admission invite`) the first daemon certifies
every honest member before it joins (`run invite`, then `join --certificate`), never a hostile
one. `--kill-every` kills a random member (SIGKILL) and restarts it 3 s later, until the creator
finished the run or the last `quiet_end` seconds of a `--duration` begin (a run's end is not the
time to inject churn); a daemon that dies by itself is reported (exit code, last error line),
never restarted, and fails the run. The run is over after `--duration`, or once every member
still in the swarm finished the spec's `rounds` and holds the same state (or a minute after).
The supervisor is local_swarm.py; the table, lines and summary are swarm_mesh_view.py.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.control import call_sync
from ..errors import ControlError, NodeError
from .local_swarm import isolation
from .moments import Moment
from .processes import DaemonProcess, node_args
from .swarm_events import OneOffEvents, export
from .swarm_mesh_report import PeakMemory, training_report
from .swarm_mesh_view import agreement, brief, line, summarise, table
from .swarm_scores import ScoreWatch

JOIN_TAIL = ["--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]
RESTART_AFTER = 3.0  # seconds a killed member stays down
AGREE_GRACE = 60.0  # seconds all finished members get to follow the trusted final state
# seconds a started member may be up without the run before it counts failed: at 60 s, a member
# restarted at load 22 on a slow machine counted failed, then joined and trained on
JOIN_GRACE = 180.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSwarmOptions:
    nodes: int = 4
    duration: float = 0.0  # 0: until Ctrl-C (or, training, until the run finishes)
    report: Path | None = None
    poll_interval: float = 2.0
    mode: str = "none"
    spec: dict[str, Any] = field(default_factory=dict)
    data: Path | None = None  # the run's user data (absolute), for the creator and each member
    kill_every: float = 0.0
    kill_at: float | None = None  # seconds in: SIGKILL one member, restart it RESTART_AFTER later
    late_join: Moment | None = None  # then (seconds in, or a round): one more daemon joins
    export: Path | None = None  # the run's model, written here at the end (run export)
    export_format: str = "safetensors"
    dashboard: str | None = None  # HOST:PORT where the first daemon serves the dashboard
    byzantine: int = 0  # the last K members send attacked updates
    attack: str = "sign-flip"
    seed: int = 0


def mesh_options(args, spec: dict[str, Any]) -> LocalSwarmOptions:
    """The options of `--mode none | diloco | diffusion` from the command line."""
    if args.mode == "diffusion" and args.nodes < 2:
        raise NodeError("--mode diffusion needs at least 2 nodes (an expert and the router)")
    if args.nodes < 1:
        raise NodeError("--nodes must be at least 1")
    return LocalSwarmOptions(
        nodes=args.nodes,
        duration=args.duration,
        report=args.report,
        mode=args.mode,
        spec=spec,
        data=args.data.expanduser().absolute() if args.data else None,
        kill_every=args.kill_every,
        kill_at=args.kill_at,
        late_join=args.late_join,
        export=args.export.expanduser().absolute() if args.export else None,
        export_format=args.export_format,
        dashboard=args.dashboard,
        byzantine=args.byzantine,
        attack=args.attack,
    )


class MeshSwarm:
    """The `none` and `diloco` modes (a `SwarmMode`)."""

    live_table = True

    def __init__(self, options: LocalSwarmOptions, base: Path, console) -> None:
        self.options, self.base, self.console = options, base, console
        self.poll_interval = options.poll_interval
        self.daemons: list[DaemonProcess] = []
        self.first_addr = ""
        self.kills = 0
        self.statuses: list[dict[str, Any] | None] = []
        self.score_watch = ScoreWatch()  # with contribution scores: what the ratings bought
        self.last_status: list[dict[str, Any] | None] = []
        self.bytes_of_killed = 0
        self.killed: set[int] = set()  # killed by us, waiting for their restart
        self.died: dict[int, dict[str, Any]] = {}  # died by themselves: exit code, log tail
        self.kills_stopped = False  # the run finished: no more kills
        self.sample: str | None = None
        self.mesh_s: float | None = None
        self._rng = random.Random(options.seed)
        self._next_kill: float | None = None
        self._restart_at: dict[int, float] = {}
        self._all_finished_at: float | None = None  # when every member first said finished
        self._without_run: dict[int, float] = {}  # member → since when it is up without the run
        self.events = OneOffEvents(self)
        self.memory = PeakMemory()
        self.exported: dict[str, Any] | None = None

    @property
    def quiet_end(self) -> float:
        """Seconds before a `--duration` ends with no more kills: two kill periods, at most a
        fifth of the run (a member killed just before the end was still restarting when the
        report was taken, and the hour's diffusion run reported its router at round 0)."""
        return min(2 * self.options.kill_every, self.options.duration / 5)

    @property
    def training(self) -> bool:
        return self.options.mode == "diloco"

    def header(self) -> dict[str, Any]:
        return {"nodes": self.options.nodes, "mode": self.options.mode}

    # --- start -----------------------------------------------------------------------------
    def start(self) -> None:
        watch = ["--metrics-listen", self.options.dashboard] if self.options.dashboard else []
        first = DaemonProcess(self.base / "node0", node_args(extra=watch), isolation().env).start()
        self.daemons.append(first)
        status = first.wait_ready()
        self.first_addr = status["share"]
        if self.options.dashboard:
            self.console.print(f"dashboard of node 0: http://{self.options.dashboard}/")
        self._started(0, status)
        if self.training:
            self._create_run(first)
        for index in range(1, self.options.nodes):  # all at once: each start is seconds of CPU
            home = self.base / f"node{index}"
            args = self._member_args() + self._hostile_or_invited(index, home)
            self.daemons.append(DaemonProcess(home, args, isolation().env).start())
        for index, daemon in enumerate(self.daemons[1:], start=1):
            self._started(index, daemon.wait_ready())
        if self.options.kill_every:
            self._next_kill = time.monotonic() + self.options.kill_every

    def _create_run(self, first: DaemonProcess) -> None:
        spec = {"min_members": self.options.nodes, **self.options.spec}
        params = {"name": isolation().run_name, "mode": "diloco", "spec": spec}
        if self.options.data is not None:
            params["data"] = str(self.options.data)
        created = call_sync(first.control_socket, "run.create", params, timeout=120)
        self.console.print(
            f"created run [bold]{isolation().run_name}[/] ({created['run_id'][:16]}…) on node 0"
        )

    def attack_of(self, index: int) -> str:
        """The attack of hostile member `index`: the `--attack` names, cycled."""
        names = [n for n in self.options.attack.split(",") if n]
        return names[(index - (self.options.nodes - self.options.byzantine)) % len(names)]

    def _hostile_or_invited(self, index: int, home: Path) -> list[str]:
        """A hostile member's `--attack`; an honest member of an invite run's certificate,
        asked of the creator for the peer ID the member's home will have (`peertrain id`)."""
        if self._byzantine(index):
            return ["--attack", self.attack_of(index)]
        if not self.training or self.options.spec.get("admission") != "invite":
            return []
        from ..net.identity import load_or_create_identity

        peer = load_or_create_identity(home).peer_id.to_base58()
        params = {"run": isolation().run_name, "peer": peer}
        invited = call_sync(self.daemons[0].control_socket, "run.invite", params, timeout=30)
        return ["--certificate", invited["certificate"]]

    def _started(self, index: int, status: dict[str, Any]) -> None:
        """Daemon `index` is up (a mode may wait here for what it does in the run)."""
        tag = f" [red](hostile: {self.attack_of(index)})[/]" if self._byzantine(index) else ""
        self.console.print(
            f"started node {index}: [bold]{status['name']}[/] {status['share']}{tag}"
        )

    def _byzantine(self, index: int) -> bool:
        return index > 0 and index >= self.options.nodes - self.options.byzantine

    def _member_args(self) -> list[str]:
        if not self.training:
            return node_args(bootstrap=[self.first_addr])
        args = ["join", self.first_addr, "--run", isolation().run_name, *JOIN_TAIL]
        model = str(self.options.spec.get("model", ""))
        if ":" in model and not model.startswith("hf:"):  # an import path: each member's user
            args += ["--model", model]  # names it (a daemon imports no code a spec names)
        if self.options.data is not None:
            args += ["--data", str(self.options.data)]  # each member's own copy, as a user's
        return args

    # --- watch -----------------------------------------------------------------------------
    def step(self, elapsed: float) -> bool:
        now = time.monotonic()
        for index, when in list(self._restart_at.items()):
            if now >= when:
                self.restart(index)
                del self._restart_at[index]
        if self.options.duration and elapsed >= self.options.duration - self.quiet_end:
            self.kills_stopped = True  # the last member killed is back before the end
        if self._next_kill is not None and now >= self._next_kill:
            killed = self.kill_one()
            if killed is not None:  # else asked again at the next poll
                self.restart_later(killed)
                self._next_kill = now + self.options.kill_every
        self.events.step(elapsed)
        self.statuses = self.poll()
        self.memory.sample(self.daemons)
        self.score_watch.saw(self.statuses, len(self.statuses) - self.options.byzantine)
        self.notice_refusals()
        for index in self.notice_deaths():
            died = self.died[index]
            code, error = died["exit_code"], died["error"]
            self.console.print(f"[red]node {index} died by itself[/] (exit {code}): {error}")
        if self.mesh_s is None and _full_mesh(self.statuses):
            self.mesh_s = round(elapsed, 2)
        done = self.finished(self.statuses) and not self._restart_at and not self.events.pending
        return done or bool(self.options.duration and elapsed >= self.options.duration)

    def poll(self) -> list[dict[str, Any] | None]:
        # down or busy this time: shown as down, the next poll asks again
        statuses = [daemon.status_or_none(timeout=3.0) for daemon in self.daemons]
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

    def notice_refusals(self) -> None:
        """A member up for `JOIN_GRACE` seconds without the run refused it (its log says why):
        it counts as failed, so the swarm ends without it and exits non-zero; it never
        trains, and the others would wait for it for good."""
        if not self.training:
            return
        now = time.monotonic()
        for index, status in enumerate(self.statuses):
            if index == 0 or index in self.died or index in self.killed or status is None:
                continue
            if status.get("run"):
                self._without_run.pop(index, None)
                continue
            since = self._without_run.setdefault(index, now)
            if now - since >= JOIN_GRACE:
                tail = self.daemons[index].log_path.read_text(errors="replace").splitlines()
                why = next((line for line in reversed(tail) if "refus" in line), "no run")
                self.died[index] = {"node": index, "exit_code": None, "error": why.strip()[:400]}
                self.console.print(f"[red]node {index} did not join the run[/]: {why[:200]}")

    def kill_one(self, among: range | None = None) -> int | None:
        """SIGKILL a random live member but the creator (of `among`, when given); its index."""
        if self.kills_stopped:
            return None
        up = [i for i, s in enumerate(self.statuses) if s is not None]  # a restarted member
        # still starting (slow on a loaded machine) is not in the run yet: killing it again
        # would keep it out for good
        candidates = [i for i in up if i > 0 and self.daemons[i].alive() and i not in self.died]
        candidates = [i for i in candidates if among is None or i in among]
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

    def restart_later(self, index: int) -> None:
        self._restart_at[index] = time.monotonic() + RESTART_AFTER

    def add_member(self) -> int:
        """One more daemon joins the run (`--late-join`); its index."""
        index = len(self.daemons)
        home = self.base / f"node{index}"
        self.daemons.append(DaemonProcess(home, self._member_args(), isolation().env).start())
        self.last_status.append(None)
        return index

    def restart(self, index: int) -> None:
        """Start it again and go on polling: a loaded machine may take longer than any fixed wait
        to answer `status` (torch import, checkpoint load), and a daemon that dies while starting
        is noticed by `notice_deaths` like any other."""
        self.daemons[index].start()
        self.killed.discard(index)
        self.console.print(f"restarted node {index}")

    def finished(self, statuses: list[dict[str, Any] | None]) -> bool:
        """Every daemon still in the swarm (not dead by itself) finished the run and holds the
        same state, or all finished `AGREE_GRACE` seconds ago (a member's finish is not the
        group's: it may follow the trusted final state seconds later). Kills stop once the
        creator, whose state the run trusts, finished: the end of a run is not the time to
        inject churn, and one member's finish is not the run's end."""
        if not self.training or not self.options.spec.get("rounds"):
            return False
        creator = statuses[0]["run"] if statuses[0] and statuses[0].get("run") else None
        if creator is not None and creator.get("finished"):
            self.kills_stopped = True
        members = [i for i in range(len(self.daemons)) if i not in self.died]
        in_run = [statuses[i]["run"] for i in members if statuses[i] and statuses[i].get("run")]
        if not (len(in_run) == len(members) > 0 and all(r["finished"] for r in in_run)):
            self._all_finished_at = None
            return False
        now = time.monotonic()
        if self._all_finished_at is None:
            self._all_finished_at = now
        honest = [r for i, r in zip(members, in_run, strict=True) if not self._byzantine(i)]
        agreed = len({r["state_checksum"] for r in honest}) <= 1
        return agreed or now - self._all_finished_at >= AGREE_GRACE

    def line(self, elapsed: float) -> str:
        return line(elapsed, self.statuses, self.kills)

    def table(self) -> Any:
        return table(self.statuses, self.mesh_s, training=self.training)

    # --- report ----------------------------------------------------------------------------
    def conclude(self) -> None:
        if self.training:
            self.sample = self._sample()
        if self.training and self.options.export is not None:
            self.exported = export(self, self.options.export, self.options.export_format)

    def report(self) -> dict[str, Any]:
        training = training_report(self) if self.training and self.statuses else {}
        out: dict[str, Any] = {
            "mesh_s": self.mesh_s,
            "kills": self.kills,
            "died": sorted(self.died.values(), key=lambda d: d["node"]),
            **training,
            **self.events.report(),
            "rss_peak_mb": self.memory.peaks(len(self.daemons)),
            "final": [brief(s) for s in self.statuses],
        }
        if self.exported is not None:
            out["export"] = self.exported
        if self.training and self.sample is not None:
            out["sample"] = self.sample
        return out

    def _sample(self) -> str | None:
        params = {"prompt": "def ", "tokens": 200}
        try:
            return call_sync(self.daemons[0].control_socket, "run.sample", params, timeout=60)[
                "text"
            ]
        except ControlError:
            return None  # not a text model

    def summarise(self, console, report: dict[str, Any]) -> None:
        summarise(console, report)

    def succeeded(self, report: dict[str, Any]) -> bool:
        """False when a daemon died by itself, one did not stop cleanly, nothing happened, or
        the honest members of a finished run hold different models."""
        clean = all(code in (0, None) for code in report["exit_codes"])
        if self.training:
            ok = report.get("rounds_completed", 0) > 0
            if self._all_finished_at is not None:  # the run ended (not a --duration cut)
                ok = ok and agreement(report.get("state_hashes", [])) == "yes"
        else:
            ok = report.get("mesh_s") is not None
        return clean and ok and not self.died and not report.get("interrupted")


def _full_mesh(statuses: list[dict[str, Any] | None]) -> bool:
    alive = [s for s in statuses if s]
    return len(alive) == len(statuses) and all(len(s["peers"]) >= len(alive) - 1 for s in alive)
