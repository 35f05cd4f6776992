"""One soak run: start the members (skewed clocks, a small disk, lossy links), play the schedule,
sample every 10 s, then wait for one checksum after the last fault; and the no-fault baseline.
"""

from __future__ import annotations

import time
from pathlib import Path

from peertrain.node.services.tensors import MAX_AGE
from peertrain.testing import DIGITS_MLP
from peertrain.testing.lan_run import LanRun
from peertrain.testing.lan_watch import Poller, Rounds

try:
    from benchmarks._soak_faults import Injector, mount_small, unmount
    from benchmarks._soak_report import log_figures
    from benchmarks._soak_samples import Samples
except ImportError:  # run as a script from the benchmarks folder
    from _soak_faults import Injector, mount_small, unmount
    from _soak_report import log_figures
    from _soak_samples import Samples

SAMPLE_EVERY = 10.0
TICK = 1.0
# s of a daemon's life before its RSS is read as flat or growing: the tensor store keeps
# unpinned tensors up to MAX_AGE, so memory grows to its working set over the first 10 minutes
WARM_UP = MAX_AGE + 120.0
AGREE_GRACE = 180.0  # s past the run's end that one checksum may still take


def run_flags(options) -> list[str]:
    return [
        *DIGITS_MLP,
        "--inner-steps",
        str(options.inner_steps),
        "--round-timeout",
        str(options.round_timeout),
        "--min-members",
        str(options.size),
        "--rounds",
        "0",
        "--set",
        f"num_shards={options.size}",
    ]


def baseline_rate(options, lan, base: Path, seconds: float) -> float | None:
    """The anchor's rounds per second in the same run without faults; None when not asked."""
    if seconds <= 0:
        return None
    run = LanRun(lan, base, options.size, run_flags(options))
    try:
        run.start()
        first = _anchor_round(run)
        started = time.monotonic()
        time.sleep(seconds)
        return (_anchor_round(run) - first) / (time.monotonic() - started)
    finally:
        run.stop()


def _anchor_round(run: LanRun) -> int:
    status = run.daemons[0].status_or_none(10.0) or {}
    return int((status.get("run") or {}).get("round", 0))


class Soak:
    def __init__(self, options, lan, base: Path, plan) -> None:
        self.options, self.lan, self.base, self.plan = options, lan, base, plan
        self.samples = Samples(options.size)
        self.rounds = Rounds(options.size)
        self.small = base / "small-home"
        self.disk_note = ""
        self.link_note = "netem (tc)"

    def run(self, seconds: float) -> dict:
        self.base.mkdir(parents=True, exist_ok=True)
        self.disk_note = mount_small(self.small, self.options.disk_mib) or ""
        homes = {} if self.disk_note else {self.plan.small_disk: self.small}
        env = {m: {"PEERTRAIN_CLOCK_SKEW_MS": str(ms)} for m, ms in self.plan.skewed.items()}
        run = LanRun(
            self.lan,
            self.base,
            self.options.size,
            run_flags(self.options),
            member_env=env,
            homes=homes,
        )
        faults = Injector(run, self.lan)
        poller = Poller(run, self.rounds)
        try:
            run.start()
            self._shape_links()
            first = _anchor_round(run)
            started = time.monotonic()
            agreed_after = self._play(run, faults, poller, started, seconds)
            measured = time.monotonic() - started
            last = poller.poll()
            penalties = run.penalties()
        finally:
            faults.thaw_all()
            codes = run.stop()
            poller.close()
            if not self.disk_note:
                unmount(self.small)
        return self._report(run, faults, last, codes, first, measured, agreed_after, penalties)

    def _shape_links(self) -> None:
        if self.lan is None:
            return
        p = self.options.plan
        if self.lan.relays:
            self.link_note = "netem in user space (TAP relay: this kernel has no sch_netem)"
        for m in self.plan.lossy:
            note = self.lan.shape(
                m, loss_pct=p.loss_pct, delay_ms=p.delay_ms, jitter_ms=p.jitter_ms
            )
            self.link_note = note or self.link_note

    def _play(self, run, faults, poller, started: float, seconds: float) -> float | None:
        """Apply every fault at its time; sample; after the last fault, wait (up to the run's
        end plus AGREE_GRACE) for every member to hold one checksum. Seconds from the last
        fault to that agreement, or None if it never came."""
        pending = list(self.plan.faults)
        last_fault, next_sample, agreed_after, since_round = None, 0.0, None, None
        while True:
            elapsed = time.monotonic() - started
            while pending and pending[0].at <= elapsed:
                faults.apply(pending.pop(0), elapsed)
                last_fault = time.monotonic()
            runs = poller.poll()
            faults.notice_crashes(elapsed)
            faults.check_restarts(runs)
            if elapsed >= next_sample:
                self.samples.take(elapsed, run.daemons, runs)
                next_sample += SAMPLE_EVERY
            if not pending and agreed_after is None:
                if since_round is None:
                    since_round = max(0, self.rounds.newest([0]))
                everyone = list(range(run.size))
                if self.rounds.first_agreement(everyone, since_round) is not None:
                    agreed_after = time.monotonic() - (last_fault or started)
            if elapsed >= seconds and (agreed_after is not None or elapsed > seconds + AGREE_GRACE):
                return agreed_after
            time.sleep(TICK)

    def _report(self, run, faults, last, codes, first, measured, agreed_after, penalties) -> dict:
        live = [r for r in last if r]
        figures = log_figures(run.daemons)
        anchor_round = int((last[0] or {}).get("round", first))
        return {
            "minutes": round(measured / 60, 2),
            "measured_s": round(measured, 1),
            "members": run.size,
            "rounds": anchor_round - first,
            "faults": dict(faults.done),
            "skipped": dict(faults.skipped),
            "agree_after_last_fault_s": round(agreed_after, 1) if agreed_after else None,
            "crashes": faults.crashes,
            "failed_restarts": faults.failed_restarts,
            "exit_codes": codes,
            "rejected_updates": sum(r.get("rejected_updates", 0) for r in live),
            "checkpoint_failures": sum(r.get("checkpoint_failures", 0) for r in live),
            "peer_faults": penalties["peer_faults"],
            **figures,
            "small_disk": self.disk_note
            or f"member {self.plan.small_disk}: {self.options.disk_mib} MiB tmpfs",
            "skewed_ms": self.plan.skewed,
            "lossy_links": list(self.plan.lossy) if self.lan else [],
            "link_faults": self.link_note if self.lan else "none (loopback)",
            "usage": self.samples.slopes(warm_up=min(WARM_UP, measured / 4)),
            "fault_log": faults.log,
        }
