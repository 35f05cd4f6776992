"""The soak's fault schedule: every fault at a time fixed in advance by a seed (FoundationDB's
simulation and Jepsen's schedules: a failing run is replayed by its seed).

Member 0 created the run and is its anchor: it is never killed, frozen or cut off (a run whose
only anchor is down waits for it by design, docs/architecture.md#partitions). Lossy links, the
small disk and the skewed clocks are set when the members start and last the whole run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MAX_EVENTS = 100_000  # an hour at the default plan is about 250


@dataclass(frozen=True, slots=True)
class Plan:
    """How often each fault comes (seconds). The defaults are the issue's hour."""

    kill_every: float = 30.0
    restart_after: float = 10.0
    stop_every: float = 300.0
    stop_for: float = 20.0
    partition_size: int = 3
    partition_for: float = 60.0
    partition_at: float = 0.5  # of the faulty period
    fill_disk_at: float = 0.3  # of the faulty period
    lossy_fraction: float = 0.5  # of the members' links get netem
    loss_pct: float = 3.0
    delay_ms: int = 80
    jitter_ms: int = 20
    skew_ms: int = 2000
    quiet: float = 0.2  # the last part of the run has no new fault: time to agree


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds from the soak's start
    kind: str  # kill | restart | stop | cont | partition | heal | fill_disk
    members: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Schedule:
    faults: list[Fault]
    lossy: tuple[int, ...]  # members whose link has netem all along
    small_disk: int  # the member whose home is a small filesystem
    skewed: dict[int, int] = field(default_factory=dict)  # member → clock skew in ms

    @property
    def last_fault_at(self) -> float:
        return max((f.at for f in self.faults), default=0.0)


def schedule(seed: int, seconds: float, size: int, plan: Plan = Plan()) -> Schedule:
    """The faults of a `seconds`-long soak of `size` members (member 0 is the anchor)."""
    rng = random.Random(seed)
    others = list(range(1, size))
    faulty = seconds * (1 - plan.quiet)
    lossy = tuple(sorted(rng.sample(range(size), max(1, int(size * plan.lossy_fraction)))))
    skewed_two = rng.sample(others, 2)
    skewed = {skewed_two[0]: plan.skew_ms, skewed_two[1]: -plan.skew_ms}
    small_disk = rng.choice(others)
    faults = [Fault(faulty * plan.fill_disk_at, "fill_disk", (small_disk,))]
    faults += _partition(rng, others, faulty, plan)
    faults += _periodic(rng, others, faulty, plan.kill_every, plan.restart_after, "kill")
    faults += _periodic(rng, others, faulty, plan.stop_every, plan.stop_for, "stop")
    faults.sort(key=lambda f: f.at)
    return Schedule(faults[:MAX_EVENTS], lossy, small_disk, skewed)


def _partition(rng: random.Random, others: list[int], faulty: float, plan: Plan) -> list[Fault]:
    if plan.partition_for <= 0 or plan.partition_size <= 0:
        return []
    cut = tuple(sorted(rng.sample(others, min(plan.partition_size, len(others)))))
    start = max(0.0, min(faulty * plan.partition_at, faulty - plan.partition_for))
    return [Fault(start, "partition", cut), Fault(start + plan.partition_for, "heal", cut)]


def _periodic(
    rng: random.Random, others: list[int], faulty: float, every: float, lasting: float, kind: str
) -> list[Fault]:
    """A fault on a random member every `every` s, undone `lasting` s later (kill → restart,
    stop → cont); none starts where its undoing would fall after the faulty period."""
    undo = {"kill": "restart", "stop": "cont"}[kind]
    faults, at = [], every
    while every > 0 and at + lasting <= faulty:
        member = (rng.choice(others),)
        faults += [Fault(at, kind, member), Fault(at + lasting, undo, member)]
        at += every
    return faults
