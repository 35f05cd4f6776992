"""Two runs named alike, through the CLI with daemons as processes: names are labels, IDs are
not. `run list` shows both; `run join --run NAME` refuses and lists both candidates; an ID
prefix joins the one it names (issue 14, item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from peertrain.node.cli.local_swarm import DAEMON_ENV
from peertrain.node.cli.processes import DaemonProcess, node_args, stop_all
from peertrain.testing import wait_until_sync

pytestmark = pytest.mark.slow

# a small run that finishes quickly: these tests are about finding runs, not training them
RUN_FLAGS = ["--model", "mlp", "--dataset", "digits", "--inner-steps", "5", "--rounds", "2"]


def peertrain(home, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "peertrain", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=150,
        check=check,
        env={**os.environ, **DAEMON_ENV},
    )


def listed(home) -> dict[str, dict]:
    runs = json.loads(peertrain(home, "run", "list", "--json").stdout)
    return {run["run_id"]: run for run in runs}


def join_args(addr: str, run: str) -> list[str]:
    return ["join", addr, "--run", run, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-format", "json"]


def test_two_runs_named_alike_are_listed_refused_by_name_and_joined_by_id_prefix(tmp_path):
    first = DaemonProcess(tmp_path / "a", node_args(), DAEMON_ENV).start()
    daemons = [first]
    try:
        addr = first.wait_ready()["share"]
        second = DaemonProcess(tmp_path / "b", node_args(bootstrap=[addr]), DAEMON_ENV).start()
        joiner = DaemonProcess(tmp_path / "c", node_args(bootstrap=[addr]), DAEMON_ENV).start()
        daemons += [second, joiner]
        ids = {}
        for creator in (first, second):
            creator.wait_ready()
            made = peertrain(creator.home, "run", "create", "--name", "twin", "--json", *RUN_FLAGS)
            ids[creator] = json.loads(made.stdout)["run_id"]
        joiner.wait_ready()
        assert ids[first] != ids[second]

        wait_until_sync(lambda: set(ids.values()) <= set(listed(joiner.home)), timeout=60)
        runs = listed(joiner.home)
        for creator, run_id in ids.items():
            run = runs[run_id]
            peer_id = creator.status()["peer_id"]
            assert (run["name"], run["creator"], run["mode"]) == ("twin", peer_id, "diloco")
            assert run["model"] == "mlp" and run["admission"] == "open"
            assert run["creator_name"] == creator.status()["name"]
        table = peertrain(joiner.home, "run", "list").stdout
        assert ids[first][:16] in table and ids[second][:16] in table

        refused = peertrain(joiner.home, "run", "join", "--run", "twin", check=False)
        assert refused.returncode == 1
        assert "2 runs are named 'twin'" in refused.stderr
        assert ids[first][:16] in refused.stderr and ids[second][:16] in refused.stderr
        assert joiner.status()["run"] is None  # nothing was joined silently

        joined = peertrain(joiner.home, "run", "join", "--run", ids[second][:10], "--json")
        assert json.loads(joined.stdout)["run_id"] == ids[second]
        assert joiner.status()["run"]["run_id"] == ids[second]

        # the daemon form, as a user starts a member: `peertrain join ADDR --run PREFIX`
        prefix = ids[first][:8]
        member = DaemonProcess(tmp_path / "d", join_args(addr, prefix), DAEMON_ENV).start()
        daemons.append(member)
        member.wait_ready()
        wait_until_sync(lambda: (member.status()["run"] or {}).get("run_id"), timeout=60)
        assert member.status()["run"]["run_id"] == ids[first]
    finally:
        stop_all(daemons)
