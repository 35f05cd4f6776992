"""Shared output for benchmarks: a readable table, then one JSON object as the very last line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in header]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(title)
    for index, row in enumerate(cells):
        print("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            print("  " + "  ".join("-" * width for width in widths))


def print_json(figures: dict[str, Any]) -> None:
    print(json.dumps(figures), flush=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)
