"""`soak.py --kill-points N`: N SIGKILLs inside durable writes, spread over every write site of
testing/kill_points.py (checkpoints and their sidecars, identity, manifest, certificate, local
data), each followed by a load in a fresh process that must find the old value or the new.

A site has a few dozen steps at most (open, write, fsync, rename, ...); beyond one pass, each
further pass kills at the same steps with another fraction of a write's bytes on disk (a
third, two thirds, ...): another instant inside the same write, not the same kill again.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from peertrain.testing.kill_points import SITES, count_points, kill_at

MAX_CORRUPT_KEPT = 32  # examples of corrupt loads in the report


def run_kill_points(total: int, base: Path) -> dict:
    counts = {site: count_points(site, base / f"count-{site}") for site in sorted(SITES)}
    # every site's first step, then every site's second, ...: a short run still visits them all
    plan = sorted(
        ((site, point) for site, points in counts.items() for point in range(points)),
        key=lambda sp: (sp[1], sp[0]),
    )
    passes = math.ceil(total / len(plan)) if plan else 0
    by_site = dict.fromkeys(counts, 0)
    corrupt: list[str] = []
    outlived = done = bad = 0
    for index in range(passes):
        torn = (index + 1) / (passes + 1)
        for site, point in plan:
            if done >= total:
                break
            where = base / f"kill-{done}"
            outcome = kill_at(site, where, point, torn)
            shutil.rmtree(where, ignore_errors=True)  # a thousand checkpoints would fill /tmp
            done += 1
            by_site[site] += 1
            outlived += not outcome.killed
            if outcome.loaded in outcome.allowed:
                continue
            bad += 1
            if len(corrupt) < MAX_CORRUPT_KEPT:
                corrupt.append(f"{site} step {point} torn {torn:.2f}: {outcome.loaded[:80]!r}")
    return {
        "kill_points": done,
        "kill_points_by_site": by_site,
        "steps_per_write": counts,
        "corrupt_loads": bad,
        "corrupt_examples": corrupt,
        "writers_outlived_kill": outlived,
    }
