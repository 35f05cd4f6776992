"""`peertrain swarm local` supervises honestly: it ends by itself when the run is finished,
reports a daemon that died on its own (and fails), and writes its report on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
from peertrain.testing import wait_until_sync

pytestmark = pytest.mark.slow

FLAGS = [
    "--mode",
    "diloco",
    "--model",
    "mlp",
    "--dataset",
    "digits",
    "--batch-size",
    "32",
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


def test_churn_ends_by_itself_when_the_run_finishes_with_one_model(tmp_path):
    supervisor = swarm_local(tmp_path, "--rounds", "12", "--kill-every", "5")
    out, _ = supervisor.communicate(timeout=300)
    report = json.loads((tmp_path / "report.json").read_text())
    assert supervisor.returncode == 0, out[-3000:]
    assert report["rounds_completed"] == 12 and report["died"] == []
    assert len(set(report["state_hashes"])) == 1 and len(report["state_hashes"]) == 3


def test_a_daemon_that_dies_by_itself_is_reported_and_fails_the_run(tmp_path):
    supervisor = swarm_local(tmp_path, "--rounds", "40")
    victims = wait_until_sync(
        lambda: len(members(supervisor)) == 3 and members(supervisor),
        timeout=120,
        what="three daemons",
    )
    time.sleep(4)  # training
    victims[2].kill()  # not the supervisor's doing: a crash, as far as it can tell
    out, _ = supervisor.communicate(timeout=400)
    report = json.loads((tmp_path / "report.json").read_text())
    assert supervisor.returncode != 0
    assert [d["node"] for d in report["died"]] == [2] and "died by itself" in out
    assert len(set(report["state_hashes"])) == 1  # the two others still agree


def test_sigterm_still_writes_the_report_of_what_happened(tmp_path):
    supervisor = swarm_local(tmp_path, "--rounds", "0")  # until stopped
    wait_until_sync(
        lambda: (tmp_path / "report.json").exists() or len(members(supervisor)) == 3,
        timeout=120,
        what="three daemons",
    )
    time.sleep(8)
    supervisor.send_signal(signal.SIGTERM)
    out, _ = supervisor.communicate(timeout=60)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] is True and report["rounds_completed"] > 0, out[-2000:]
    assert all(code == 0 for code in report["exit_codes"])
