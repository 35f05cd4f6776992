"""`peertrain run show RUN`: the run-wide view (node/runs/run_view.py) as a table.

One row per live member: what it says of itself in its signed lease (round, state checksum,
samples/s, device, version, public name), then whether the members agree at the newest round.
Rows are claims: a member cannot write another's row, but nobody checks its own figures.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .commands import call_daemon

COLUMNS = ("", "PEER", "NAME", "ROUND", "CHECKSUM", "SAMPLES/S", "DEVICE", "VERSION")


def cmd_run_show(args: argparse.Namespace) -> int:
    view = call_daemon(args, "run.show", {"run": args.run or ""})
    print(json.dumps(view) if args.json else show(view))
    return 0


def show(view: dict[str, Any]) -> str:
    """The view as lines: a heading, agreement at a glance, the table, its legend."""
    grouped = view["agreement"].get("groups", 1) > 1  # a diffusion run's expert groups
    columns = (*COLUMNS[:3], "GROUP", *COLUMNS[3:]) if grouped else COLUMNS
    rows = [_cells(row, grouped) for row in view["members"]]
    widths = [max(len(line[i]) for line in [columns, *rows]) for i in range(len(columns))]
    table = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [columns, *rows]
    ]
    left_out = view["total"] - len(view["members"])
    more = [f"  … and {left_out} more members"] if left_out > 0 else []
    legend = "* this node; the other rows are each member's own signed claim, not checked"
    return "\n".join([heading(view), agreement(view), "", *table, *more, legend])


def heading(view: dict[str, Any]) -> str:
    agreed = view["agreement"]["round"]
    of = {None: "", 0: " (no end)"}.get(view["rounds"], f" of {view['rounds']}")
    parts = [
        f"run {view['name']} ({view['run_id'][:16]}…)",
        view["mode"],
        f"{view['total']} member{'' if view['total'] == 1 else 's'}",
        f"round {agreed if agreed is not None else '–'}{of}",
    ]
    if view["eta_s"] is not None:
        parts.append(f"ETA {duration(view['eta_s'])}")
    parts.append(f"{speed(view['samples_per_s'])} samples/s in all (claimed)")
    return " · ".join(parts)


def agreement(view: dict[str, Any]) -> str:
    a = view["agreement"]
    if a["round"] is None:
        return "agreement: no member reports its progress yet"
    behind = a["reporting"] - a["at_round"]
    late = f"; {behind} at earlier rounds" if behind else ""
    differ = a["at_round"] - a["holders"]
    other = f", {differ} hold another state" if differ else ""
    if a.get("groups", 1) > 1:  # a diffusion run: each expert group agrees on its own model
        return (
            f"agreement: {a['holders']} of {a['at_round']} members at their group's newest round "
            f"hold their group's state ({a['groups']} groups){other}{late}"
        )
    held = f"hold state {a['checksum']}" if a["checksum"] else "report no state yet"
    return (
        f"agreement: {a['holders']} of {a['at_round']} members at round {a['round']} "
        f"{held}{other}{late}"
    )


def _cells(row: dict[str, Any], grouped: bool) -> tuple[str, ...]:
    rate = row["samples_per_s"]
    group = (row.get("group") or "–",) if grouped else ()
    return (
        "*" if row["me"] else "",
        short(row["peer"]),
        row["name"] or "–",
        *group,
        "–" if row["round"] is None else str(row["round"]),
        row["checksum"] or "–",
        "–" if rate is None else speed(rate),
        row["device"] or "–",
        row["version"] or "–",
    )


def speed(rate: float) -> str:
    """Three or four figures: "1098", "731", "52.5"."""
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.1f}"


def short(peer: str) -> str:
    return f"{peer[:8]}…{peer[-6:]}" if len(peer) > 16 else peer


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
