"""Attacks on state agreement, as a hook on an otherwise ordinary DiLoCo member.

A member with one of these on trains and sends its updates like any other, and beside that
keeps claiming states nobody should adopt, the way a stranger on the internet would:

    future-round    announces (in RunState) and attests (a signed round record) a checkpoint of
                    round 10^9 that it does not serve
    poisoned-state  serves a NaN state whose checksum matches what it announces and attests,
                    one round ahead of its own

Honest members must not adopt either, nor stop, nor spend a download on them in an invite run
(swarm/diloco/group/trust.py, adoption.py, and the admission's drops). `swarm local --hostile K
--attack NAME` runs daemons with one of these on beside honest ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import trio
from peertrain.crdt.writer import RunWriter
from peertrain.protocol.tensors import prepare_tensor
from peertrain.swarm.diloco.group.state_sync import STATE_NAME
from peertrain.swarm.exchange.gossip import UpdateGossip
from peertrain.swarm.exchange.round_record import RoundRecord

if TYPE_CHECKING:
    from peertrain.swarm.diloco.group.driver import DiLoCoDriver

log = logging.getLogger(__name__)

STATE_ATTACKS = ("future-round", "poisoned-state")
FUTURE_ROUND = 10**9
EVERY = 2.0  # seconds between claims: each is re-announced as a joiner would miss the first


@dataclass(slots=True, kw_only=True)
class HostileStates:
    """Claims states of `name`'s kind every `EVERY` seconds while the member runs."""

    name: str
    writer: RunWriter
    gossip: UpdateGossip
    tensors: object  # the driver's TensorTransport: `put(prepared, pin=...)`
    state_numel: int  # parameters + outer momentum: the size of a real state
    state_name: str
    current_round: Callable[[], int]
    current_checksum: Callable[[], bytes | None]
    _poison: object = None  # the NaN state, prepared once

    def __post_init__(self) -> None:
        if self.name not in STATE_ATTACKS:
            raise ValueError(f"unknown state attack {self.name!r}; one of {STATE_ATTACKS}")
        log.warning("this member is hostile: it claims states by the %r attack", self.name)

    async def run(self) -> None:
        claim = self._future_round if self.name == "future-round" else self._poisoned_state
        while True:
            await claim()
            await trio.sleep(EVERY)

    async def _future_round(self) -> None:
        """A checkpoint of round 10^9 that nobody serves, attested by our signed record."""
        checksum = bytes([0xEE]) * 32
        self.writer.provide_checkpoint(FUTURE_ROUND, checksum)
        await self._attest(FUTURE_ROUND, checksum)

    async def _poisoned_state(self) -> None:
        """A NaN state of the run's exact size, served and attested one round ahead of ours."""
        round_ = self.current_round() + 1
        if self._poison is None:
            poisoned = torch.full((self.state_numel,), float("nan"))
            self._poison = await trio.to_thread.run_sync(prepare_tensor, self.state_name, poisoned)
            self.tensors.put(self._poison, pin=True)  # type: ignore[attr-defined]
        prepared = self._poison
        checksum = prepared.header.checksum  # type: ignore[attr-defined]
        self.writer.provide_checkpoint(round_, checksum)
        await self._attest(round_, checksum)

    async def _attest(self, round_: int, checksum: bytes) -> None:
        start = self.current_checksum() or bytes(32)
        record = RoundRecord(start=start, updates=(), result=checksum)
        await self.gossip.publish_record(round_, record)


def hostile_states(attack: str | None, driver: DiLoCoDriver) -> HostileStates | None:
    """The state claims of `--attack NAME` for `driver`'s member; None unless NAME is one."""
    if attack not in STATE_ATTACKS:
        return None
    return HostileStates(
        name=attack,
        writer=driver.replicator.writer,
        gossip=driver.gossip,
        tensors=driver.tensors,
        state_numel=2 * driver.member.layout.numel,  # parameters and outer momentum
        state_name=STATE_NAME,
        current_round=lambda: driver.member.round,
        current_checksum=lambda: driver.sync.served,
    )
