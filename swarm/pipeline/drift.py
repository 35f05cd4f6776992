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

A report is a server's claim about itself, and in an open run any fresh ID may serve a stage, so
a majority of reports is no proof. Where the run's trusted signers (its anchors: the creator)
serve the stage, their reports alone decide (`trusted`). Where none does, the majority still
decides, since honest copies must meet again, but what it can do is bounded: an adopted state
must be finite and lie within `repair_bound` of ours, the distance a few Adam steps can move
the parameters (Adam moves each by at most about 3.2 lr a step at the default betas). Honest
drift is a round or two of different averages, well inside it; three Sybil servers that hold a
stage can pull an honest copy no further per repair than their gradients could in a few rounds,
instead of replacing it. A donor that raced ahead while we gathered (routine: it applied the next
round meanwhile) hands over a state no checksum vouches for; it is taken within the bound for its
lead, from an untrusted donor only `UNTRUSTED_LEAD` rounds ahead at most (averaging.py).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import torch

from .stage import StageServer

CHECKSUM_BYTES = 16
ADAM_STEP_BOUND = 4.0  # × lr: the most one Adam step moves a parameter (≈ 3.2 at betas .9/.999)
UNTRUSTED_LEAD = 2  # rounds an untrusted donor's unmatched state may be ahead of the decided one
REPAIR_ROUNDS = 2  # rounds of honest drift a repair may undo, beside each round of the donor's lead


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


def repair_bound(*, lr: float, numel: int, lead: int) -> float:
    """How far (L2) an adopted state may lie from ours: what Adam could move `numel` parameters
    in REPAIR_ROUNDS rounds plus the `lead` rounds the state is ahead of ours."""
    return ADAM_STEP_BOUND * lr * math.sqrt(numel) * (REPAIR_ROUNDS + max(lead, 0))


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a downloaded stage state was not adopted; `hostile`: a lie or a poison, which honest
    drift never produces (the donor is penalised), rather than a state merely too far away."""

    why: str
    hostile: bool


def repair_problem(
    state: torch.Tensor, own: torch.Tensor, *, lr: float, lead: int
) -> Refused | None:
    """Why a downloaded stage state (flat, parameters first: migration.py) must not replace our
    parameters `own` (flat), or None."""
    if not bool(torch.isfinite(state).all()):
        return Refused("state holds NaN or Inf values", hostile=True)
    distance = float(torch.linalg.vector_norm(state[: own.numel()].double() - own.double()))
    bound = repair_bound(lr=lr, numel=own.numel(), lead=lead)
    if not math.isfinite(distance) or distance > bound:
        return Refused(f"state lies {distance:.3g} from ours, more than {bound:.3g} allows", False)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Repair:
    """Re-sync from one of `donors` (they hold `checksum` after round `round`; trusted ones
    first). `trusted`: the donors whose state of a later round may be taken unmatched."""

    round: int
    checksum: bytes
    donors: tuple[str, ...]
    trusted: frozenset[str] = frozenset()


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

    def check(
        self,
        round_: int,
        me: str,
        reports: Mapping[str, bytes],
        trusted: Collection[str] | None = None,
    ) -> Repair | None:
        """`reports`: checksums after round `round_`, ours included, by peer. A `Repair` if ours
        lost to the stage's majority and we did not try a repair in the last `cooldown` rounds.
        `trusted`: the run's trusted signers (None: every server of a private stage is); the
        reports of those among them that serve the stage decide alone."""
        if me not in reports or len(reports) < 2:
            return None
        self._compared += 1
        vouched = {} if trusted is None else {p: c for p, c in reports.items() if p in trusted}
        winner, holders = majority(vouched or reports)
        if len(set(reports.values())) > 1:
            self._drifted += 1
        if reports[me] == winner:
            return None
        if self._last_repair is not None and round_ < self._last_repair + self.cooldown:
            return None
        self._last_repair = round_
        others = sorted(p for p, c in reports.items() if c == winner and p not in holders)
        return Repair(
            round=round_,
            checksum=winner,
            donors=(*holders, *others),
            trusted=frozenset(reports if trusted is None else vouched),
        )

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
