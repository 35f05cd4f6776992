"""examples/diloco_own_loop.py as a user runs it: two processes on loopback, one creates the run,
the other joins through the first's address; both end with the same model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from peertrain.testing import wait_until_sync

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "diloco_own_loop.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def start(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.log"
    with out.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--rounds", "3", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=ENV,
        )
    return process, out


CHECKSUM = r"[0-9a-f]{16}"


def printed(log: Path, label: str, value_pattern: str = r"\S+", timeout: float = 60.0) -> str:
    """The value the example printed after `label` (waiting for it), as `value_pattern` reads
    it: the log is stdout and stderr together, unbuffered, and print() writes its text and its
    newline apart, so py-libp2p's complaints on stderr at shutdown can land between the two
    ("model checksum 87029a935d71131bFailed to open stream …", seen once)."""

    def value() -> str | None:
        found = re.search(rf"^{re.escape(label)} ({value_pattern})", log.read_text(), re.M)
        return found[1] if found else None

    try:
        return wait_until_sync(value, timeout=timeout, interval=0.2, what=f"{label!r} printed")
    except TimeoutError as exc:
        raise AssertionError(f"{log.name}: {exc}:\n{log.read_text()[-3000:]}") from None


def test_two_processes_wrapping_their_own_loop_end_with_the_same_model(tmp_path):
    creator, creator_log = start(tmp_path, "creator")
    try:
        joiner, joiner_log = start(tmp_path, "joiner", "--peer", printed(creator_log, "address"))
        try:
            assert joiner.wait(timeout=240) == 0, joiner_log.read_text()[-3000:]
            assert creator.wait(timeout=60) == 0, creator_log.read_text()[-3000:]
        finally:
            joiner.kill()
    finally:
        creator.kill()
    logs = [creator_log, joiner_log]
    for log in logs:
        assert "round 3:" in log.read_text()  # three exchanges, each ended in the user's loop
    assert len({printed(log, "group checksum", CHECKSUM) for log in logs}) == 1
    assert len({printed(log, "model checksum", CHECKSUM) for log in logs}) == 1  # θ_global in both
