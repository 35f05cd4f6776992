"""The run-wide view: every live member's progress report as one table, and what it adds up to.

Each row is what a member says of itself in its own signed lease (crdt/member_report.py): a
peer cannot write another's row, but nobody checks a row's figures either, so the table is
labelled as claims (`claimed`: every row but ours). "Agreement at a glance" counts the members
whose state checksum at the newest reported round is the most common one there: equal
checksums at one round mean equal models (the checksum hashes parameters and momentum).

`peertrain run show` prints it (node/cli/run_show.py), the dashboard draws it (run status's
`view`), and neither decides anything on it: whose updates count and which state is trusted
are the training layer's business (swarm/diloco/group/trust.py, roster.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypedDict

from peertrain.crdt.runstate import RunState

MAX_ROWS = 64  # rows in a status (polled every second by the dashboard); `run show` asks all


class MemberRow(TypedDict):
    peer: str
    name: str
    round: int | None  # None: the member publishes no report (an older version, or not yet)
    checksum: str
    samples_per_s: float | None
    device: str
    version: str
    me: bool
    claimed: bool  # the member's own word, unchecked (every row but ours)


class Agreement(TypedDict):
    round: int | None  # the newest round any member reports
    checksum: str  # the most common checksum at that round
    holders: int  # members reporting that checksum at that round
    at_round: int  # members reporting that round
    reporting: int  # members with a report at all


class RunView(TypedDict):
    members: list[MemberRow]
    total: int  # live members (rows beyond `limit` left out)
    agreement: Agreement
    rounds: int | None  # the run's length (0: no end; None: not known before the driver runs)
    samples_per_s: float  # the members' claimed speeds, summed
    eta_s: float | None  # seconds to the last round at our pace; None: unknown or no end


def run_view(
    state: RunState,
    *,
    me: str,
    rounds: int | None,
    seconds_per_round: float | None,
    limit: int = MAX_ROWS,
) -> RunView:
    """The table of `state`'s live members (the newest rounds first, at most `limit` rows)."""
    rows = [_row(peer, member.info.report, me) for peer, member in state.members().items()]
    rows.sort(
        key=lambda r: (-(r["round"] if r["round"] is not None else -1), not r["me"], r["peer"])
    )
    agreement = agreement_of(rows)
    newest = agreement["round"]
    eta = None
    if rounds and newest is not None and seconds_per_round is not None:
        eta = max(rounds - newest, 0) * seconds_per_round
    return RunView(
        members=rows[:limit],
        total=len(rows),
        agreement=agreement,
        rounds=rounds,
        samples_per_s=round(sum(r["samples_per_s"] or 0.0 for r in rows), 2),
        eta_s=None if eta is None else round(eta, 1),
    )


def _row(peer: str, report: Any, me: str) -> MemberRow:
    return MemberRow(
        peer=peer,
        name=report.name if report else "",
        round=report.round if report else None,
        checksum=report.checksum if report else "",
        samples_per_s=report.samples_per_s if report else None,
        device=report.device if report else "",
        version=report.version if report else "",
        me=peer == me,
        claimed=peer != me,
    )


def agreement_of(rows: list[MemberRow]) -> Agreement:
    reported = [r for r in rows if r["round"] is not None]
    newest = max((r["round"] for r in reported), default=None)
    at_newest = Counter(r["checksum"] for r in reported if r["round"] == newest and r["checksum"])
    checksum, holders = max(at_newest.items(), key=lambda kv: (kv[1], kv[0]), default=("", 0))
    return Agreement(
        round=newest,
        checksum=checksum,
        holders=holders,
        at_round=sum(1 for r in reported if r["round"] == newest),
        reporting=len(reported),
    )
