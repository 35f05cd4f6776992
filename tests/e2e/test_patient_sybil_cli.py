"""Issue 34 end to end: a patient Sybil must out-work the honest members, not out-number them.

Twelve daemons through `peertrain swarm local` (real processes, real libp2p, the run's anchor
scoring with `--set scoring=anchors`): 4 honest, 8 Sybils that free-ride for 10 rounds of 20
(zero updates, copies of other members' updates, random directions of an honest norm) and then
all send updates scaled 1000× or sign-flipped 10× at once. Without scores the Sybils would fill the
counted group at 4 a round and be its majority when they attack; with them, they are rated on
seeded probe batches, never earn a place, and are not counted when they attack. The same run
without Sybils (4 daemons, same spec and seed) is the yardstick for the final loss, read as the
mean eval loss of the last five rounds (a small model's loss bounces ±15% from round to round
at its plateau). Three of them, because one alone is no yardstick: it depends on the peer IDs
drawn (each round's shard of each member is a hash of the round's start and the peer), and over
five runs here the clean five-round means spanned 0.118 to 0.136.

Round 0 counts the anchor alone and rates every founder's update, and a founder counts from
round 1 only if that first rating says it worked (roster.py): the Sybils are in no aggregate,
ever. Counting founders unrated, as before, put their zero, copied and random updates into the
aggregates of rounds 0 and 1 and cost the honest run about a round (attacked runs 0.132, 0.132
and 0.147 against clean ones of 0.118 to 0.136). Now, measured: clean 0.139, 0.116 and 0.126
(mean 0.127), with 8 Sybils 0.128, 1.01x the clean mean. One attacked run against three clean
ones is a comparison of noisy samples (a clean run alone lands anywhere in ±8% of their mean),
so the bound below is 1.10x the worst clean run, and the mechanism is asserted directly: no
Sybil counted in any round.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SWITCH = 10  # the round the Sybils attack from
ROUNDS = 20
FLAGS = [
    *"--mode diloco --model mlp --dataset digits --batch-size 32 --inner-steps 20".split(),
    *f"--lr 0.003 --rounds {ROUNDS} --seed 3 --round-timeout 30".split(),
    *"--set scoring=anchors --set num_shards=4 --set outer_momentum=0.5".split(),
]
PATIENT = ",".join(
    f"{a}/{b}@{SWITCH}"
    for a, b in (("zero", "scaled"), ("copy", "sign-flip-10"), ("random", "scaled"))
)


def start(tmp_path: Path, name: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    """One `swarm local` run in the background; its output goes to NAME.log."""
    report = tmp_path / f"{name}.json"
    command = [sys.executable, "-m", "peertrain", "swarm", "local", *FLAGS, *extra]
    command += ["--report", str(report), "--log-format", "plain"]
    with (tmp_path / f"{name}.log").open("w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return process, report


def finish(run: tuple[subprocess.Popen, Path]) -> dict:
    process, report = run
    try:
        returncode = process.wait(timeout=900)  # 12 daemons on 2 cores: 8 minutes on a slow one
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert returncode == 0, report.with_suffix(".log").read_text()[-3000:]
    return json.loads(report.read_text())


def plateau(report: dict) -> float:
    """The mean eval loss of the run's last five rounds."""
    losses = report["loss_by_round"]
    last = sorted(losses, key=int)[-5:]
    assert len(last) == 5, losses
    return sum(losses[r] for r in last) / len(last)


def test_a_patient_sybil_never_counts_and_its_attack_changes_nothing(tmp_path):
    # round 0 waits for every daemon: all twelve are founders, so the honest members are rated
    # on the updates they send in the round, not pulled as latecomers (a joiner that arrives
    # after a small founding group has raced ahead was rated `missing` round after round on a
    # fresh clone: the known weakness of admission, named in docs/security.md)
    # the three clean runs side by side (12 daemons, as many as the attacked run), then that
    clean_runs = [
        start(tmp_path, f"clean{i}", "--nodes", "4", "--min-members", "4") for i in range(3)
    ]
    try:
        clean = [plateau(finish(run)) for run in clean_runs]
    finally:  # one that failed leaves the others to end here, not to outlive the test
        for process, _ in clean_runs:
            if process.poll() is None:
                process.kill()
                process.wait()
    attacked = finish(start(
        tmp_path, "sybils", "--nodes", "12", "--min-members", "12", "--hostile", "8",
        "--attack", PATIENT,
    ))  # fmt: skip
    assert attacked["rounds_completed"] == ROUNDS
    assert len(attacked["state_hashes"]) == 4 and len(set(attacked["state_hashes"])) == 1
    print(f"last five rounds' loss: clean {clean}, with 8 Sybils {plateau(attacked):.4f}")
    assert plateau(attacked) <= 1.10 * max(clean)
    scores = attacked["scores"]
    print(json.dumps(scores["by_node"]))
    # every honest member above every Sybil, and no Sybil counted in any round: the founders
    # are rated in round 0 before anyone but the anchor counts
    assert max(scores["hostile_ratings"]) < min(scores["honest_ratings"]), scores
    print("Sybils counted by round:", scores["hostile_counted_by_round"])
    counted = scores["hostile_counted_by_round"]
    assert len(counted) >= ROUNDS and not any(counted.values()), counted
    assert attacked["rejected_updates"] == 0  # their attack never reached an aggregate
