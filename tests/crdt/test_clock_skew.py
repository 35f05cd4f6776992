"""`PEERTRAIN_CLOCK_SKEW_MS` moves a process's hybrid-clock wall time (the soak's skewed clocks)."""

from __future__ import annotations

import os
import subprocess
import sys

READ = (
    "import time; from peertrain.crdt.hlc import wall_clock_ms; "
    "print(wall_clock_ms() - time.time_ns() // 1_000_000)"
)


def offset_with(skew: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PEERTRAIN_CLOCK_SKEW_MS"}
    if skew is not None:
        env["PEERTRAIN_CLOCK_SKEW_MS"] = skew
    done = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True)
    return int(done.stdout.strip())


def test_the_skew_is_added_to_the_wall_clock_and_nothing_without_it():
    assert abs(offset_with("-2000") + 2000) <= 5
    assert abs(offset_with(None)) <= 5
