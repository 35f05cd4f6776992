"""Issue 34 end to end: a patient Sybil must out-work the honest members, not out-number them.

Twelve daemons through `peertrain swarm local` (real processes, real libp2p, the run's anchor
scoring with `--set scoring=anchors`): 4 honest, 8 Sybils that free-ride for 10 rounds of 20
(zero updates, copies of other members' updates, random directions of an honest norm) and then
all send updates scaled 1000× or sign-flipped 10× at once. Without scores the Sybils would fill the
counted group at 4 a round and be its majority when they attack; with them, they are rated on
seeded probe batches, never earn a place, and are not counted when they attack. The same run
without Sybils (4 daemons, same spec and seed) is the yardstick for the final loss: three of them,
because one alone is no yardstick. Its final loss depends on the peer IDs drawn (each round's
shard of each member is a hash of the round's start and the peer), and over nine runs here it
ended anywhere from 0.104 to 0.153; the attacked run must end within 5% of the worst of three.
"""

from __future__ import annotations

import json
import subprocess
import sys

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


def swarm(tmp_path, name: str, *extra: str) -> dict:
    report = tmp_path / f"{name}.json"
    command = [sys.executable, "-m", "peertrain", "swarm", "local", *FLAGS, *extra]
    command += ["--report", str(report), "--log-format", "plain"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:]
    return json.loads(report.read_text())


def test_a_patient_sybil_never_counts_and_its_attack_changes_nothing(tmp_path):
    # round 0 waits for every daemon: all twelve are founders, so the honest members are rated
    # on the updates they send in the round, not pulled as latecomers (a joiner that arrives
    # after a small founding group has raced ahead was rated `missing` round after round on a
    # fresh clone: the known weakness of admission, named in docs/security.md)
    clean = [
        swarm(tmp_path, f"clean{i}", "--nodes", "4", "--min-members", "4")["final_loss"]
        for i in range(3)
    ]
    attacked = swarm(
        tmp_path, "sybils", "--nodes", "12", "--min-members", "12", "--hostile", "8",
        "--attack", PATIENT,
    )  # fmt: skip
    assert attacked["rounds_completed"] == ROUNDS
    assert len(attacked["state_hashes"]) == 4 and len(set(attacked["state_hashes"])) == 1
    print(f"final loss: clean {clean}, with 8 Sybils {attacked['final_loss']:.4f}")
    assert attacked["final_loss"] <= 1.05 * max(clean)
    scores = attacked["scores"]
    print(json.dumps(scores["by_node"]))
    # every honest member above every Sybil, and no Sybil counted when they attack (everyone
    # present at round 0 counts at once; a free rider was out after its second rating: no
    # Sybil counted from round 2 on, measured)
    assert max(scores["hostile_ratings"]) < min(scores["honest_ratings"]), scores
    print("Sybils counted by round:", scores["hostile_counted_by_round"])
    late = {int(r): n for r, n in scores["hostile_counted_by_round"].items() if int(r) >= SWITCH}
    assert late and not any(late.values()), scores["hostile_counted_by_round"]
    assert attacked["rejected_updates"] == 0  # their attack never reached an aggregate
