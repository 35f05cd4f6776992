"""How many inner steps make a round of a given length on this machine, measured before a run.

Tests whose assertions are about time (a partition shorter than the anchor's lease that still
spans one of the group's rounds) cannot fix a round's inner steps: the same digits MLP ran
1,000 steps a second per daemon on one of our 2-core machines and 150 on another, and 4,000
steps made a 4 s round there and a 26 s one here. `inner_steps_for` times the run's model in
this process, on one thread, and scales by the share of the cores each daemon gets.
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch
from peertrain.swarm.diloco.member.build import build_member
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

PROBE_STEPS = 300  # inner steps timed (a second or less on the slowest machine seen)
# daemons do more than inner steps on their cores (gossip, the run state, status polls): five
# digits-MLP daemons on 2 cores took 150 steps a second each where one thread alone took 660
OVERHEAD = 1.8


def steps_per_second(spec: DiLoCoSpec) -> float:
    """Inner steps a second of `spec`'s model on one thread of this process."""
    built = build_member(dataclasses.replace(spec, inner_steps=PROBE_STEPS), "pace-probe")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built.member.inner.run(20)  # warm-up: first-call allocations, the data pipeline
        started = time.perf_counter()
        built.member.inner.run(PROBE_STEPS)
        return PROBE_STEPS / (time.perf_counter() - started)
    finally:
        torch.set_num_threads(threads)


def inner_steps_for(
    seconds: float, spec: DiLoCoSpec, *, daemons: int, least: int = 200, multiple: int = 100
) -> int:
    """Inner steps of `spec` that take about `seconds` in each of `daemons` daemons sharing
    this machine's cores (at least `least`, rounded to `multiple`)."""
    share = min(1.0, (os.cpu_count() or 1) / daemons)
    steps = seconds * steps_per_second(spec) * share / OVERHEAD
    return max(least, round(steps / multiple) * multiple)
