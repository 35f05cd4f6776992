"""`peertrain swarm local` supervises honestly: it ends by itself when the run is finished,
reports a daemon that died on its own (and fails), and writes its report on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading

import psutil
import pytest
from peertrain.testing import DIGITS_MLP

pytestmark = pytest.mark.slow

FLAGS = [
    "--mode",
    "diloco",
    *DIGITS_MLP,
    "--inner-steps",
    "5",
    "--round-timeout",
    "8",
    "--set",
    "num_shards=3",
]


def swarm_local(tmp_path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "peertrain",
            "swarm",
            "local",
            "--nodes",
            "3",
            *FLAGS,
            *extra,
            "--report",
            str(tmp_path / "report.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def members(supervisor: subprocess.Popen) -> list[psutil.Process]:
    """The daemons the supervisor started (its `peertrain node start`/`join` children)."""
    children = psutil.Process(supervisor.pid).children()
    return [c for c in children if "peertrain" in " ".join(c.cmdline())]


def read_until_round(supervisor: subprocess.Popen, round_: int, timeout: float = 240) -> str:
    """The supervisor's output up to its first status line showing node 0 at `round_` or later
    (every member trains by then: round 0 waits for all three)."""
    watchdog = threading.Timer(timeout, supervisor.kill)  # a hang fails the test, bounded
    watchdog.start()
    seen: list[str] = []
    try:
        for line in supervisor.stdout:
            seen.append(line)
            found = re.search(r"\] r(\d+) ", line)
            if found and int(found.group(1)) >= round_:
                return "".join(seen)
    finally:
        watchdog.cancel()
    raise AssertionError(f"no round {round_} before the output ended:\n{''.join(seen)[-3000:]}")


def test_churn_ends_by_itself_when_the_run_finishes_with_one_model(tmp_path):
    # 8 rounds of ~5 s: about 4 kills, each restarted member catches up by a state download
    supervisor = swarm_local(tmp_path, "--rounds", "8", "--kill-every", "5")
    out, _ = supervisor.communicate(timeout=300)
    report = json.loads((tmp_path / "report.json").read_text())
    assert supervisor.returncode == 0, out[-3000:]
    assert report["rounds_completed"] == 8 and report["died"] == []
    assert len(set(report["state_hashes"])) == 1 and len(report["state_hashes"]) == 3


def test_a_daemon_that_dies_by_itself_is_reported_and_fails_the_run(tmp_path):
    # killed once the run trains (a kill while the daemon starts ends the supervisor's start,
    # which is another path), with rounds left for the other two to finish without it
    supervisor = swarm_local(tmp_path, "--rounds", "8")
    early = read_until_round(supervisor, 1)
    members(supervisor)[2].kill()  # not the supervisor's doing: a crash, as far as it can tell
    out, _ = supervisor.communicate(timeout=400)
    report = json.loads((tmp_path / "report.json").read_text())
    assert supervisor.returncode != 0
    assert [d["node"] for d in report["died"]] == [2] and "died by itself" in out, early + out
    assert report["rounds_completed"] == 8 and len(report["state_hashes"]) == 2
    assert len(set(report["state_hashes"])) == 1  # the two others still agree


def test_sigterm_still_writes_the_report_of_what_happened(tmp_path):
    supervisor = swarm_local(tmp_path, "--rounds", "0")  # until stopped
    read_until_round(supervisor, 1)
    supervisor.send_signal(signal.SIGTERM)
    out, _ = supervisor.communicate(timeout=60)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True and report["rounds_completed"] > 0, out[-2000:]
    assert all(code == 0 for code in report["exit_codes"])
