"""The run-wide view: every live member's progress report as one table, and what it adds up to.

Each row is what a member says of itself in its own signed lease (crdt/member_report.py): a
peer cannot write another's row, but nobody checks a row's figures either, so the table is
labelled as claims (`claimed`: every row but ours). "Agreement at a glance" counts the members
whose state checksum at the newest reported round is the most common one there: equal
checksums at one round mean equal models (the checksum hashes parameters and momentum). A
diffusion run's expert groups each train a model of their own at a pace of their own, so there
it is counted within each group (a row's `group`, the role its member announces) and summed.

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
    group: str  # the role the member announces: "diloco", or a diffusion run's expert group
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
    checksum: str  # the most common checksum at that round ("" when the groups are several)
    holders: int  # members reporting their group's most common checksum at its newest round
    at_round: int  # members reporting their group's newest round
    reporting: int  # members with a report at all
    groups: int  # groups with a report (one in a DiLoCo run)


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
    rows = [_row(peer, m.info.role, m.info.report, me) for peer, m in state.members().items()]
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


def _row(peer: str, group: str, report: Any, me: str) -> MemberRow:
    return MemberRow(
        peer=peer,
        group=group,
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
    by_group: dict[str, list[MemberRow]] = {}
    for row in reported:
        by_group.setdefault(row["group"], []).append(row)
    glances = [_glance(group_rows) for group_rows in by_group.values()]
    return Agreement(
        round=max((g[0] for g in glances), default=None),
        checksum=glances[0][1] if len(glances) == 1 else "",
        holders=sum(g[2] for g in glances),
        at_round=sum(g[3] for g in glances),
        reporting=len(reported),
        groups=len(glances),
    )


def _glance(rows: list[MemberRow]) -> tuple[int, str, int, int]:
    """(newest round, its most common checksum, members holding it, members at that round) of
    one group's reporting members."""
    newest = max(r["round"] or 0 for r in rows)
    at_newest = [r for r in rows if r["round"] == newest]
    counts = Counter(r["checksum"] for r in at_newest if r["checksum"])
    checksum, holders = max(counts.items(), key=lambda kv: (kv[1], kv[0]), default=("", 0))
    return newest, checksum, holders, len(at_newest)
