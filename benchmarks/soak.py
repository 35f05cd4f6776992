"""An hour of the faults volunteers bring, against 8 CLI daemons in one DiLoCo run.

Each daemon runs in a network namespace of its own with its own link (testing/netns_lan.py;
root, `ip`, `nft` and `tc`; without them, loopback, and the faults that need links are
skipped, with the reason printed). A seeded schedule (`--seed`, benchmarks/_soak_schedule.py):
a random member other than the anchor (member 0, the run's creator) SIGKILLed every 30 s and
restarted 10 s later; one SIGSTOPped for 20 s every 5 minutes; 3% loss and 80 ± 20 ms delay on
half the links (netem; where the kernel has none, the same in user space on TAP links,
testing/tap_relay.py); 3 members cut off for 60 s, then healed; one member's home on a small
tmpfs that is filled up; two members' clocks 2 s ahead and behind (`PEERTRAIN_CLOCK_SKEW_MS`,
crdt/hlc.py). The last fifth of the run has no new fault. With `--modes`, a SWARM pipeline (6
servers, one killed half way) and a 2-expert diffusion run (a member killed and restarted every
2 minutes) run beside it from the baseline on (benchmarks/_soak_modes.py).

Reported: rounds against the same run without faults (`--baseline-minutes`), seconds from the
last fault until every member holds one checksum, updates lost, state downloads and bytes,
crashes, failed restarts and honest peers penalised (targets 0), each daemon's RSS and fds
sampled every 10 s with their slope per hour, a PNG of rounds, RSS and fds beside the JSON
report; with `--kill-points N`, N SIGKILLs inside durable writes (benchmarks/_soak_kill_points.py)
and the corrupt loads among them (target 0). The last line is one JSON object.

    sudo .venv/bin/python benchmarks/soak.py [--minutes 60] [--seed 1] [--kill-points 200] [--modes]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from peertrain.testing.netns_lan import Lan, has_netem, why_unavailable
from peertrain.testing.tap_relay import why_unavailable as why_no_tap

try:
    from benchmarks._report import print_json, print_table
    from benchmarks._soak_kill_points import run_kill_points
    from benchmarks._soak_modes import Beside
    from benchmarks._soak_report import plot, table_rows
    from benchmarks._soak_run import Soak, baseline_rate
    from benchmarks._soak_schedule import Plan, schedule
except ImportError:  # run as a script from the benchmarks folder
    from _report import print_json, print_table
    from _soak_kill_points import run_kill_points
    from _soak_modes import Beside
    from _soak_report import plot, table_rows
    from _soak_run import Soak, baseline_rate
    from _soak_schedule import Plan, schedule

SIZE = 8


@dataclass
class Options:
    minutes: float = 60.0
    seed: int = 1
    baseline_minutes: float | None = None  # None: a quarter of --minutes, at most 10
    kill_points: int = 0
    size: int = SIZE
    inner_steps: int = 600
    round_timeout: float = 20.0
    disk_mib: int = 48
    plan: Plan = field(default_factory=Plan)
    out: Path | None = None  # the report's folder (default: a temporary one)
    loopback: bool = False  # force the loopback fallback
    modes: bool = False  # a SWARM pipeline and a diffusion run beside (benchmarks/_soak_modes.py)


def run_soak(options: Options) -> dict:
    """The whole soak: baseline, faults, kill points; the report as a dict."""
    out = options.out or Path(tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    reason = "--loopback asked for" if options.loopback else why_unavailable()
    if reason:
        print(f"no network namespaces ({reason}): loopback; partitions and netem are skipped")
    seconds = options.minutes * 60
    plan = schedule(options.seed, seconds, options.size, options.plan)
    base_minutes = options.baseline_minutes
    if base_minutes is None:
        base_minutes = min(10.0, options.minutes / 4)
    with _beside(options, out / "modes", base_minutes * 60 + seconds) as beside:
        with _lan(reason, options.size) as lan:  # the baseline's links are plain
            rate = baseline_rate(options, lan, out / "baseline", base_minutes * 60)
        with _lan(reason, options.size, plan.lossy) as lan:
            soak = Soak(options, lan, out / "soak", plan)
            report = soak.run(seconds)
        if beside is not None:
            report["modes"] = beside.finish(time.monotonic())
    report.update(
        transport=f"loopback ({reason})" if reason else "namespaces",
        seed=options.seed,
        baseline_rounds_per_min=round(rate * 60, 2) if rate is not None else None,
        baseline_rounds=round(rate * report["measured_s"]) if rate is not None else None,
        plan=asdict(options.plan),
    )
    if options.kill_points:
        report.update(run_kill_points(options.kill_points, out / "kill-points"))
    report["png"] = str(out / "soak.png")
    report["png_missing"] = plot(out / "soak.png", soak.samples, rate)
    (out / "soak.json").write_text(json.dumps(report, indent=1, default=str))
    return report


@contextmanager
def _beside(options: Options, out: Path, seconds: float):
    """With --modes, the SWARM pipeline and the diffusion run beside both phases (their own
    kills: benchmarks/_soak_modes.py), ended when the soak ends; else None."""
    if not options.modes:
        yield None
        return
    with Beside(out) as beside:
        beside.start(seconds)  # from their own start: they end a little before the soak
        yield beside


@contextmanager
def _lan(reason: str | None, size: int, lossy: tuple[int, ...] = ()):
    """The soak's LAN (None on loopback). Without netem in the kernel, the lossy members' links
    are relayed in user space (testing/tap_relay.py) so that they are delayed, not only lossy."""
    if reason:
        yield None
        return
    relayed = lossy if lossy and not has_netem() and not why_no_tap() else ()
    with Lan(size, relayed=relayed) as lan:
        yield lan


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline-minutes", type=float, default=None)
    parser.add_argument("--kill-points", type=int, default=0)
    parser.add_argument("--inner-steps", type=int, default=600)
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: temp)")
    parser.add_argument(
        "--modes", action="store_true", help="a SWARM pipeline and a diffusion run beside"
    )
    parser.add_argument("--loopback", action="store_true", help="no namespaces, even as root")
    args = parser.parse_args(argv)
    options = Options(
        minutes=args.minutes,
        seed=args.seed,
        baseline_minutes=args.baseline_minutes,
        kill_points=args.kill_points,
        inner_steps=args.inner_steps,
        out=args.out,
        loopback=args.loopback,
        modes=args.modes,
    )
    report = run_soak(options)
    print_table("soak", ["figure", "value"], table_rows(report))
    print(f"report: {report['png'].replace('.png', '.json')}  png: {report['png']}")
    brief = {k: v for k, v in report.items() if k not in ("usage", "fault_log", "plan")}
    print_json(brief)
    return report


if __name__ == "__main__":
    main()
