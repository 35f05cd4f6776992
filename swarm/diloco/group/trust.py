"""Which group state a member may adopt: trusted attestations, then checks of the state itself.

A checkpoint announcement in RunState says "I hold state X of round r". Anyone can announce
anything, and peer IDs are free, so neither "the highest round anybody announced" nor "the
checksum most providers announced" may decide what a member downloads: a stranger would pick
the round (10^9, nobody serves it) and three fresh IDs would outvote two honest members. A state
is adopted by download only when the run's trusted signers attest it:

- open runs: the anchors (the creator and the peers its signed spec names); one anchor suffices,
  several that disagree are settled by most anchors, then the larger checksum (every member
  picks the same one);
- invite runs: more than half of the certified members that hold a live lease; when every one
  of them attested and none holds a majority (members that closed a round with different
  update sets), the most attested state, then the larger checksum, so they do not part for good.

A trusted signer can still be wrong: a stolen or buggy anchor key attests a state of a far round
that nobody serves, or one that fails the checks, and every member would hold in "downloading
state" for good. A signer whose attested state could not be fetched, or was refused, for longer
than `patience` is unreliable for `UNRELIABLE_FOR` seconds: its attestations stop counting, so
the newest state the other signers attest decides again; with none left, members keep their own
states (no state is adopted on anyone else's word), as when no signer is live.

Whatever the attestation, the state itself is checked before use (`StateCheck`): the expected
element count, finite values, a round no further than the newest trusted attestation, and, for
a member that is already training, a bounded distance from its own state: the parameters may
move by at most `DRIFT_PER_ROUND` × (rounds ahead + 1) × max(‖θ_own‖, 1). One round of honest
DiLoCo moves θ by a fraction of its norm; a state further away than the whole model per round of
lead is a replacement, not training, and is refused even from an anchor.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import trio
from peertrain.crdt.admission import Admission
from peertrain.crdt.runstate import RunState
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

log = logging.getLogger(__name__)

Checkpoints = dict[int, dict[bytes, frozenset[str]]]  # RunState.checkpoints(): one read of it

DRIFT_PER_ROUND = 1.0  # relative to max(‖θ_own‖, 1), per round the state is ahead of ours (+1)
UNRELIABLE_FOR = 600.0  # seconds a signer's attestations stop counting (then it is tried again)
MAX_FAILING = 16  # attested states whose failures are timed at once


class TrustedStates:
    """The checkpoint registry as trusted signers attest it (a view of RunState)."""

    def __init__(
        self, state: RunState, admission: Admission, me: str, *, patience: float = 120.0
    ) -> None:
        self.state, self.admission, self.me = state, admission, me
        self.patience = patience  # seconds an attested state may fail before its signers do
        self.unreliable: dict[str, tuple[float, str]] = {}  # peer → (until, why) in trio time
        self._failing: dict[tuple[int, bytes], float] = {}  # (round, checksum) → first failure

    def attesters(self) -> frozenset[str]:
        """Whose checkpoint announcements count now (unreliable signers' do not)."""
        if self.admission.invite:
            trusted = frozenset(self._certified_live())
        else:
            trusted = self.admission.trusted_attesters()
        return trusted - self._unreliable_now() if self.unreliable else trusted

    def _unreliable_now(self) -> frozenset[str]:
        now = trio.current_time()
        for peer in [p for p, (until, _) in self.unreliable.items() if until <= now]:
            del self.unreliable[peer]
        return frozenset(self.unreliable)

    def failed(self, round_: int, checksum: bytes, why: str) -> None:
        """The attested state `checksum` of `round_` could not be fetched or was refused; once
        that lasted `patience`, its signers (not us) are unreliable."""
        now = trio.current_time()
        first = self._failing.setdefault((round_, checksum), now)
        while len(self._failing) > MAX_FAILING:
            del self._failing[next(iter(self._failing))]
        if now - first < self.patience:
            return
        signers = self.attested(round_).get(checksum, frozenset()) - {self.me}
        reason = f"its state of round {round_} failed for {now - first:.0f} s ({why[:120]})"
        for peer in sorted(signers):
            self.unreliable[peer] = (now + UNRELIABLE_FOR, reason)
            log.warning("anchor %s is unreliable: %s", peer, reason)
        del self._failing[(round_, checksum)]

    def fetched(self, round_: int, checksum: bytes) -> None:
        self._failing.pop((round_, checksum), None)

    def unreliable_status(self) -> dict[str, str]:
        """peer → why, for status."""
        self._unreliable_now()
        return {peer: why for peer, (_, why) in sorted(self.unreliable.items())}

    def any_attester_live(self) -> bool:
        return any(p == self.me or self.state.is_live(p) for p in self.attesters())

    def other_attester_live(self) -> bool:
        """A trusted signer other than us holds a live lease (one that may still attest)."""
        return any(p != self.me and self.state.is_live(p) for p in self.attesters())

    def _certified_live(self) -> set[str]:
        return {p for p in self.admission.certified() if p == self.me or self.state.is_live(p)}

    def attested(
        self, round_: int, checkpoints: Checkpoints | None = None
    ) -> dict[bytes, frozenset[str]]:
        """checksum → trusted peers announcing it for `round_` (live ones, and us)."""
        trusted = self.attesters()
        checkpoints = self.state.checkpoints() if checkpoints is None else checkpoints
        out = {}
        for checksum, providers in checkpoints.get(round_, {}).items():
            vouching = frozenset(p for p in providers if p in trusted)
            if vouching:
                out[checksum] = vouching
        return out

    def verdict(self, round_: int, checkpoints: Checkpoints | None = None) -> bytes | None:
        """The state of `round_` that members adopt, or None when no trusted attestation holds."""
        attested = self.attested(round_, checkpoints)
        if not attested:
            return None
        checksum, vouching = max(attested.items(), key=lambda kv: (len(kv[1]), kv[0]))
        if self.admission.invite and 2 * len(vouching) <= len(certified := self._certified_live()):
            if not certified <= frozenset().union(*attested.values()):
                return None  # no majority of the certified members (yet)
            # every live certified member attested and no state has a majority: members split
            # by timing (one closed a round without an update another had). All pick the same
            # one, most attested then the larger checksum, and repair to it rather than part
        return checksum

    def newest_round(self) -> int:
        """The newest round with a trusted state; -1 if none."""
        # the run state is read once, newest round first: the round loop asks this on every
        # announcement, and a daemon spent a tenth of its CPU on it reading the state per round
        checkpoints = self.state.checkpoints()
        for round_ in sorted(checkpoints, reverse=True):
            if self.verdict(round_, checkpoints) is not None:
                return round_
        return -1


@dataclass(frozen=True, slots=True, kw_only=True)
class StateCheck:
    """What an adopted state (params ‖ momentum, fp32) must satisfy."""

    numel: int  # parameters of the run's model
    newest_trusted_round: int

    def problem(
        self, flat: torch.Tensor, round_: int, own: torch.Tensor | None, own_round: int
    ) -> str | None:
        """Why `flat` (for `round_`) must not be adopted, or None. `own`: our parameters when we
        are already training (None for a joiner, which has nothing to compare with)."""
        if flat.numel() != 2 * self.numel:
            return f"state of {flat.numel()} values does not fit this run's model"
        if round_ > self.newest_trusted_round:
            return (
                f"round {round_} lies beyond the newest trusted one ({self.newest_trusted_round})"
            )
        if not bool(torch.isfinite(flat).all()):
            return "state holds NaN or Inf values"
        if own is not None:
            lead = max(round_ - own_round, 0) + 1
            distance = float(torch.linalg.vector_norm(flat[: self.numel] - own))
            bound = DRIFT_PER_ROUND * lead * max(float(torch.linalg.vector_norm(own)), 1.0)
            if not math.isfinite(distance) or distance > bound:
                return f"state lies {distance:.3g} from ours, more than {bound:.3g} allows"
        return None


def install_admission(
    state: RunState, spec: DiLoCoSpec, me: str, certificate: bytes = b""
) -> Admission:
    """The run's admission policy (who is a member, who is trusted), from the signed spec, on
    the replica it guards; `certificate`: ours, in invite runs."""
    if state.admission is not None:
        return state.admission
    manifest = state.manifest
    admission = Admission(
        run_id=state.run_id,
        creator=manifest.creator if manifest is not None else me,
        mode=spec.admission,
        anchors=frozenset(spec.anchors),
        wall_ms=state.wall_ms,
    )
    if certificate:
        admission.add_certificate(certificate)
    dropped = state.install_admission(admission)
    if dropped:
        log.info("forgot %d non-member(s) of this invite run", len(dropped))
    return admission
