"""The soak (benchmarks/soak.py) in five minutes: the same code and fault kinds as the hour,
5 daemons on a reduced schedule (a member SIGKILLed every 20 s and restarted 8 s later, one
frozen for 12 s every 45 s, 3 cut off for 25 s, links with 3% loss and 80 ± 20 ms delay, a home
that fills up, two skewed clocks); then a kill point inside a durable write of each write site
(every point of every site is tests/hostile/test_kill_points.py's). The targets hold: no
crash, no failed restart, no honest peer penalised, one checksum on every member after the last
fault, no corrupt load.

Namespaces when root has `ip`, `nft` and `tc` (else loopback, with partitions and link faults
skipped: the rest still runs); the delay by netem, or in user space where the kernel has none.
Loads both cores for its minutes: serial.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.netns]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def soak_module():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("soak"), importlib.import_module("_soak_schedule")


def test_a_short_soak_meets_the_targets(tmp_path):
    soak, schedule = soak_module()
    plan = schedule.Plan(
        kill_every=20.0,
        restart_after=8.0,
        stop_every=45.0,
        stop_for=12.0,
        partition_for=25.0,
        quiet=0.3,
    )
    options = soak.Options(
        minutes=4.0,  # and about a minute to start, agree and kill inside writes: 5 minutes
        seed=2,  # its SIGSTOP falls on a live member (a seed whose does not skips it)
        baseline_minutes=0,
        kill_points=5,  # one a site: the soak's own path (the 36 points: tests/hostile)
        size=5,
        inner_steps=600,
        plan=plan,
        out=tmp_path,
    )
    report = soak.run_soak(options)
    brief = {k: v for k, v in report.items() if k not in ("usage", "plan")}
    print(brief)
    assert report["faults"].get("kill", 0) >= 3 and report["faults"].get("stop", 0) >= 1, brief
    assert report["crashes"] == [] and report["failed_restarts"] == 0, brief
    assert report["honest_penalised"] == 0 and report["peer_faults"] == 0, brief
    assert report["agree_after_last_fault_s"] is not None, brief
    assert report["kill_points"] >= 5 and report["corrupt_loads"] == 0, brief
    assert report["tracebacks"] == 0, brief
    if report["transport"] == "namespaces":
        assert report["faults"].get("partition") == 1 and report["lossy_links"], brief
        assert "no delay" not in report["link_faults"], brief
