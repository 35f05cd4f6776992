"""What a remote signer may write into a run's state: the checks of one signed delta that need
nothing but the delta, the clock and the run's admission (RunState.check_remote adds capacity).

- Its own slots only: a delta that writes another peer's record is forged (forwarding is not
  signing).
- No stamp beyond the clock's horizon: a stamp far in the future would win every last-writer
  register until then.
- Invite runs: the signer holds a valid certificate, known or carried in this very delta.
- Score cards are the scorers' (the anchors', `Admission.trusted_attesters`): a card is up to
  16 KiB in its owner's slot, read by nobody but from an anchor, so anyone else's would only
  park memory in every replica (an open run's 1024 owners: 16 MiB).
"""

from __future__ import annotations

from .admission import Admission
from .errors import ClockDrift, ForbiddenWrite, NotAdmitted
from .rundoc import RunDoc


def check_delta(
    signer: str, delta: RunDoc, *, horizon_ms: int, admission: Admission | None
) -> None:
    """Raise unless `signer` may write `delta` (its error names the rule and the signer)."""
    strangers = delta.writers() - {signer}
    if strangers:
        raise ForbiddenWrite(f"delta signed by {signer} writes slots of {sorted(strangers)[:3]}")
    for _, stamp, _ in [*delta.members.registers(), *delta.scores.registers()]:
        if stamp.wall_ms > horizon_ms:
            raise ClockDrift(f"a stamp of {signer} lies too far in the future")
    if admission is None:
        return  # no manifest yet: nothing to admit against
    _check_admitted(signer, delta, admission)
    if delta.scores.keys() and signer not in admission.trusted_attesters():
        raise ForbiddenWrite(f"{signer} keeps a score card, but only the run's anchors score")


def _check_admitted(signer: str, delta: RunDoc, admission: Admission) -> None:
    """Invite runs: the signer holds a valid certificate, known or in this delta's record."""
    if admission.admits(signer):
        return
    record = delta.members.get(signer)
    if record is not None and record.certificate:
        certificate = admission.add_certificate(record.certificate)
        if certificate.peer == signer and admission.admits(signer):
            return
    raise NotAdmitted(f"{signer} is no member of this invite run")
