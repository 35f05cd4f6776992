"""Drift between a stage's copies: state checksums, the stage's majority, and when to re-sync.

Servers of one stage are meant to stay bitwise identical (averaging.py), but a peer left out of a
round by some servers and not others splits the stage into copies that never meet again unless
someone moves. So every server hashes its stage state after each round it applies, and the
servers compare those hashes at equal rounds: the checksum of a server's state after round k-1
rides on its round-k contribution (the averaging exchange, not RunState: every server of the stage
already talks to every other once per round, about exactly that round, so the hashes arrive at
equal steps at no extra message, where a record renewed every few seconds would rarely line up).

The checksum covers what the stage computes with: the parameters, in order, as fp32 bytes, and
the optimizer's step count (Adam's bias correction depends on it). Moments are left out: two
copies whose moments differ step differently and show up one round later anyway.

The winner of round k is the checksum most servers hold; ties go to the larger checksum, so
every server that sees the same reports picks the same winner without talking. A server whose
own checksum loses downloads the stage state from one of the winner's holders. `DriftGuard` keeps
that cheap and calm: a decision needs at least one other report, and after a repair it waits
`cooldown` rounds before it tries again (the repaired state shows up in the next round's
comparison; a second try on the round right after would fetch twice for one drift).

Each server decides on the reports it gathered; a peer that answered some servers and not others
can make them see different majorities. The cost is bounded: a needless download of a winner's
state (which is the stage's state anyway), at most once per `cooldown` rounds.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .stage import StageServer

CHECKSUM_BYTES = 16


def _digest(tensors: list[torch.Tensor], adam_step: int) -> bytes:
    h = hashlib.blake2b(digest_size=CHECKSUM_BYTES)
    for t in tensors:
        h.update(memoryview(t.detach().float().contiguous().reshape(-1).numpy()).cast("B"))
    h.update(int(adam_step).to_bytes(8, "little"))
    return h.digest()


def adam_step_of(server: StageServer) -> int:
    """The optimizer's step count (the largest over the parameters; 0 before the first step)."""
    state = server._optimizer.state
    return max(
        (int(state[p]["step"]) for p in server._params if "step" in state.get(p, {})), default=0
    )


def state_checksum(server: StageServer) -> bytes:
    """Checksum of `server`'s stage state (sync: call in a worker thread)."""
    with server._lock:
        return _digest(list(server._params), adam_step_of(server))


def flat_checksum(flat: torch.Tensor, numel: int, adam_step: int) -> bytes:
    """The same checksum, of a state exported by migration.py (`[params | moments]`, flat)."""
    return _digest([flat[:numel]], adam_step)


def majority(reports: Mapping[str, bytes]) -> tuple[bytes, list[str]]:
    """(the winning checksum, its holders sorted): most holders, ties to the larger checksum."""
    if not reports:
        raise ValueError("no checksums to compare")
    counts = Counter(reports.values())
    winner = max(counts, key=lambda checksum: (counts[checksum], checksum))
    return winner, sorted(peer for peer, checksum in reports.items() if checksum == winner)


@dataclass(frozen=True, slots=True, kw_only=True)
class Repair:
    """Re-sync from one of `donors` (they hold `checksum` after round `round`)."""

    round: int
    checksum: bytes
    donors: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DriftStatistics:
    compared: int  # rounds whose checksums we compared with at least one peer
    drifted: int  # of those, rounds in which some copy differed (ours or another's)
    resyncs: int  # repairs that replaced our state
    failed: int  # repairs for which no donor delivered


class DriftGuard:
    """Decides, round by round, whether this server's copy lost and must be repaired."""

    def __init__(self, *, cooldown: int = 2) -> None:
        self.cooldown = cooldown
        self._last_repair: int | None = None
        self._compared = self._drifted = self._resyncs = self._failed = 0

    def check(self, round_: int, me: str, reports: Mapping[str, bytes]) -> Repair | None:
        """`reports`: checksums after round `round_`, ours included, by peer. A `Repair` if ours
        lost to the stage's majority and we did not try a repair in the last `cooldown` rounds."""
        if me not in reports or len(reports) < 2:
            return None
        self._compared += 1
        winner, holders = majority(reports)
        if len(set(reports.values())) > 1:
            self._drifted += 1
        if reports[me] == winner:
            return None
        if self._last_repair is not None and round_ < self._last_repair + self.cooldown:
            return None
        self._last_repair = round_
        return Repair(round=round_, checksum=winner, donors=tuple(holders))

    def repaired(self, ok: bool) -> None:
        if ok:
            self._resyncs += 1
        else:
            self._failed += 1

    @property
    def resyncs(self) -> int:
        return self._resyncs

    def statistics(self) -> DriftStatistics:
        return DriftStatistics(
            compared=self._compared,
            drifted=self._drifted,
            resyncs=self._resyncs,
            failed=self._failed,
        )
