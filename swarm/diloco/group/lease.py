"""Our member record in the run state: the lease that keeps us counted, and the progress report
the run-wide view reads (`peertrain run show`, the dashboard; crdt/member_report.py).

The lease is renewed every third of its length, so two lost renewals cost nothing. The report
rides it: a new round or a new state is told at the next look (a second), not at the next
renewal, so the run's table is at most a second behind each member; speed alone changing waits
for the renewal (one small signed record per member and round, not one a second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from peertrain.crdt.member_report import (
    MAX_DEVICE_LEN,
    MAX_NAME_LEN,
    MAX_SAMPLES_PER_S,
    MAX_VERSION_LEN,
    MemberReport,
)
from peertrain.crdt.replicator import Replicator
from peertrain.swarm.diloco.group.progress import DriverProgress

LEASE_MS = 30_000
RENEW_EVERY = LEASE_MS / 3000  # seconds
LOOK_EVERY = 1.0  # seconds between looks at our round and state


@dataclass(frozen=True, slots=True)
class Introduction:
    """How this member names itself to the run: its owner's public name (`--name`) and the
    peertrain version it runs. The node knows them; the training layer only passes them on."""

    name: str = ""
    version: str = ""


ANONYMOUS = Introduction()  # tests and tools that name nobody


class LeaseHolder(Protocol):
    """What of the driver (driver.py) the lease reads."""

    progress: DriverProgress
    spec: Any  # DiLoCoSpec: batch_size, accumulation
    replicator: Replicator
    sync: Any  # StateSync (state_sync.py): the state we serve
    certificate: bytes  # ours, in an invite run (it may arrive while the run is on)
    addrs: Callable[[], list[str]]

    @property
    def member(self) -> Any: ...  # DiLoCoMember: its inner loop's device


class MemberLease:
    def __init__(self, driver: LeaseHolder, introduction: Introduction, *, clock=time.monotonic):
        self.driver = driver
        self.introduction = introduction
        self._clock: Callable[[], float] = clock
        self._device: str | None = None

    def report(self) -> MemberReport:
        """Where we stand now, as the run-wide view shows us."""
        progress, spec = self.driver.progress, self.driver.spec
        samples = progress.steps * spec.batch_size * spec.accumulation
        speed = samples / progress.wall_seconds if progress.wall_seconds > 0 else 0.0
        speed = min(speed, MAX_SAMPLES_PER_S)  # a bound the record refuses to cross
        served = self.driver.sync.served_state  # a round and its checksum, never two rounds'
        round_, checksum = (served[0], served[1].hex()[:16]) if served else (progress.round, "")
        return MemberReport(
            round=round_,
            checksum=checksum,
            samples_per_s=round(speed, 2),
            device=self.device(),
            version=self.introduction.version[:MAX_VERSION_LEN],
            name=self.introduction.name[:MAX_NAME_LEN],  # checked at start (node/config.py)
        )

    def device(self) -> str:
        """Where we train, with the accelerator's model ("cuda:0 NVIDIA H200"): read once."""
        if self._device is None:
            device = getattr(self.driver.member.inner, "device", "")
            text = str(device)
            if getattr(device, "type", "") == "cuda":
                import torch

                text = f"{text} {torch.cuda.get_device_name(device)}"
            self._device = "".join(c for c in text if c.isprintable())[:MAX_DEVICE_LEN]
        return self._device

    def announce(self) -> MemberReport:
        report = self.report()
        driver = self.driver
        driver.replicator.writer.announce(
            role="diloco",
            addrs=driver.addrs()[:8],
            lease_ms=LEASE_MS,
            certificate=driver.certificate,
            report=report,
        )
        return report

    async def run(self) -> None:
        told, renewed = self.announce(), self._clock()
        while True:
            await trio.sleep(LOOK_EVERY)
            now = self.report()
            moved = (now.round, now.checksum) != (told.round, told.checksum)
            if moved or self._clock() - renewed >= RENEW_EVERY:
                told, renewed = self.announce(), self._clock()
