"""The soak's `--modes`: a SWARM pipeline and a diffusion run beside the DiLoCo run, each one
`peertrain swarm local` of its own, as a user would start it, for the whole soak.

The pipeline: 6 stage servers over 3 stages and 2 trainers, a stage-1 server SIGKILLed half way
(`--kill-at`: its microbatches rerouted, the stage rebalanced). The diffusion run: 2 expert
groups and a router on 3 daemons, a random member other than the creator SIGKILLed and restarted
every `kill_every` s (`--kill-every`). They share the machine and its two cores with the DiLoCo
members from the baseline on, so the baseline's rounds are measured beside them too.

Each mode's own report says whether it succeeded (its exit code: every daemon it did not kill
ended cleanly, and it trained); every daemon process of a mode is sampled every 10 s for RSS and
open fds, and the slope per hour of each one that lived long enough is reported.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

try:
    from benchmarks._soak_samples import slope_per_hour
except ImportError:  # run as a script from the benchmarks folder
    from _soak_samples import slope_per_hour

MB = 1 << 20
STOP_GRACE = 120.0  # s for a mode past its duration to write its report and stop its daemons
MIN_LIFE = 600.0  # s of a daemon's life after warm-up for its slope to mean anything
SAMPLE_EVERY = 10.0


def mode_argv(mode: str, seconds: float, report: Path, kill_every: float) -> list[str]:
    base = [sys.executable, "-m", "peertrain", "swarm", "local", "--log-format", "plain"]
    base += ["--duration", str(round(seconds)), "--report", str(report)]
    if mode == "swarm":
        return base + ["--mode", "swarm", "--nodes", "6", "--stages", "3", "--trainers", "2",
                       "--kill-at", str(round(seconds / 2))]  # fmt: skip
    return base + ["--mode", "diffusion", "--experts", "2", "--nodes", "3",
                   "--kill-every", str(kill_every)]  # fmt: skip


class Beside:
    """The modes, started by `start` and ended (report read) by `finish`."""

    def __init__(self, out: Path, *, kill_every: float = 120.0) -> None:
        self.out, self.kill_every = out, kill_every
        self.processes: dict[str, subprocess.Popen] = {}
        self.series: dict[str, dict[int, list[tuple[float, float, int]]]] = {}
        self.started = 0.0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample_until_done, daemon=True)

    def start(self, seconds: float) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        for mode in ("swarm", "diffusion"):
            argv = mode_argv(mode, seconds, self.out / f"{mode}.json", self.kill_every)
            log = open(self.out / f"{mode}.log", "wb")  # noqa: SIM115 (the child holds it)
            self.processes[mode] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            self.series[mode] = {}
        self._sampler.start()

    def _sample_until_done(self) -> None:
        while not self._done.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        """RSS and fds of every daemon of every mode (the supervisor's children)."""
        at = time.monotonic() - self.started
        for mode, process in self.processes.items():
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    rss, fds = child.memory_info().rss / MB, child.num_fds()
                except psutil.Error:
                    continue
                self.series[mode].setdefault(child.pid, []).append((at, rss, fds))

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        """Whatever happened, no mode outlives the soak."""
        self._done.set()
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()

    def finish(self, deadline: float) -> dict:
        """Wait for each mode to end by itself until `deadline` (monotonic) plus a grace, then
        SIGTERM it (it writes its report then); each mode's outcome and its daemons' slopes."""
        outcome = {}
        for mode, process in self.processes.items():
            try:
                process.wait(timeout=max(1.0, deadline - time.monotonic()) + STOP_GRACE)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            outcome[mode] = self._outcome(mode, process.returncode)
        self._done.set()
        return outcome

    def _outcome(self, mode: str, code: int | None) -> dict:
        path = self.out / f"{mode}.json"
        report = json.loads(path.read_text()) if path.exists() else {}
        figures = {"succeeded": code == 0, "exit_code": code, "report": str(path)}
        if mode == "swarm":
            keys = ("samples", "throughput", "lost_microbatches", "retries", "killed")
            keys += ("initial_loss", "final_loss")
        else:
            keys = ("rounds_completed", "expert_loss", "router_accuracy", "kills", "died")
        figures.update({k: report.get(k) for k in keys if k in report})
        figures["daemons"] = self._slopes(mode)
        return figures

    def _slopes(self, mode: str, warm_up: float = 120.0) -> list[dict]:
        out = []
        for pid, points in self.series[mode].items():
            start = points[0][0]
            warm = [p for p in points if p[0] - start >= warm_up]
            if not warm or warm[-1][0] - warm[0][0] < MIN_LIFE:
                continue
            out.append(
                {
                    "pid": pid,
                    "minutes": round((warm[-1][0] - start) / 60, 1),
                    "rss_mb_last": round(warm[-1][1], 1),
                    "rss_mb_per_h": slope_per_hour([(t, r) for t, r, _ in warm]),
                    "fds_per_h": slope_per_hour([(t, f) for t, _, f in warm]),
                }
            )
        return out
