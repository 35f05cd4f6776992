"""One stranger with 256 fresh keys cannot stall an open run: a hostile member (`swarm local
--hostile 1 --attack announce-flood`) announces updates for the next two rounds from 256 keys
of its own, as their own gossipsub messages. Members' announcements used to find each round's
table full of strangers, and every round waited its whole deadline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial]

FLAGS = "--mode diloco --model mlp --dataset digits --batch-size 32 --inner-steps 20".split()


def swarm(tmp_path, name: str, *extra: str) -> dict:
    report = tmp_path / f"{name}.json"
    command = [sys.executable, "-m", "peertrain", "swarm", "local", *FLAGS, *extra]
    command += ["--rounds", "8", "--round-timeout", "20", "--report", str(report)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:]
    return json.loads(report.read_text())


def test_an_announcement_flood_from_fresh_keys_leaves_every_round_to_the_members(tmp_path):
    # the same run without the attack: five daemons, the fifth honest (the attacker trains as
    # usual beside its flood, and on two cores a fifth daemon's training alone costs ~20%)
    clean = swarm(tmp_path, "clean", "--nodes", "5")
    flooded = swarm(
        tmp_path, "flooded", "--nodes", "5", "--hostile", "1", "--attack", "announce-flood"
    )
    # the clean run again after it: the machine's load drifts (a fresh-clone run measured the
    # clean arm at 10.1 s and the flooded one at 15.6 s just as the suite's parallel phase
    # ended; alone, 1.17x), so the flooded run is held to the mean of a clean run on each side
    again = swarm(tmp_path, "clean-again", "--nodes", "5")
    assert flooded["rounds_completed"] == 8 and flooded["rounds_alone"] == 0
    assert len(flooded["state_hashes"]) == 4 and len(set(flooded["state_hashes"])) == 1
    # a stalled round waits its 20 s deadline: 8 of them would be 160 s; measured (load 1.7-2.4):
    # clean 11.9 s, flooded 13.9 s (1.17x). On a slower machine the flood's own CPU costs more,
    # and varies: 1.15x to 1.48x in four runs, 1.24x in one of the code before, every round
    # taking all five updates. 10 s of slack still fails a run with one stalled round
    rounds = {
        r: report["total_s"] - report["startup_s"]
        for r, report in (("clean", clean), ("flooded", flooded), ("again", again))
    }
    baseline = (rounds["clean"] + rounds["again"]) / 2
    assert rounds["flooded"] < 1.3 * baseline + 10, rounds
    clean_loss = max(clean["final_loss"], again["final_loss"])
    assert flooded["final_loss"] <= clean_loss * 1.05  # every honest update counted
