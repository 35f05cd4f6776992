"""What contribution scores cost and how well they separate honest work from free riding.

    .venv/bin/python benchmarks/scoring.py [--rounds 20] [--models digits,gpt]

A group of `--honest` counted members (the first scores, as an anchor does) and one free rider
of each kind on probation beside an honest newcomer, round after round with real inner steps
(testing/scoring_group.py): zero updates, copies of a counted member's update, replays of the
rider's own last update, random directions of an honest norm (cheap noise), and honest work on
a shard that is not the rider's. Arms: the digits MLP, and the byte-level text GPT.

Reported per arm: the final rating of every kind (honest members: the lowest), whether every
honest member ends admitted (rating, evaluations and fit) and no rider does, the round from which
every rider's rating stays below every honest member's (work on another's shard is told by its
fit, not its rating), and the scorer's cost: seconds of scoring per round against one member's
seconds of inner steps (its share of that member's compute). Prints a table, then, as the last line,
one JSON object with the figures; the 1-minute load average beside them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec  # noqa: E402
from peertrain.swarm.scoring.rating import earned  # noqa: E402
from peertrain.testing.scoring_group import KINDS, run_scored  # noqa: E402

ARMS = {
    "digits": dict(model="mlp", dataset="digits", inner_steps=20, batch_size=16, lr=1e-3),
    "gpt": dict(
        model="gpt",
        dataset="text",
        inner_steps=10,
        batch_size=8,
        lr=1e-3,
        model_settings={"n_layer": 2, "n_embd": 64, "n_head": 2, "block_size": 64},
    ),
}


def separated_by(ratings: list[dict[str, float]], kinds: dict[str, str]) -> int | None:
    """The first round from which every rider stays below every honest member for good."""
    first = None
    for round_, rated in enumerate(ratings):
        honest = [r for p, r in rated.items() if kinds[p] in ("member", "honest")]
        riders = [r for p, r in rated.items() if kinds[p] not in ("member", "honest")]
        ok = honest and riders and max(riders) < min(honest)
        first = (first if first is not None else round_) if ok else None
    return first


def arm(name: str, rounds: int, honest: int) -> dict:
    spec = DiLoCoSpec(**ARMS[name], warmup_steps=5, num_shards=8)
    run = run_scored(spec, honest=honest, riders={k: 1 for k in KINDS}, rounds=rounds)
    final = {kind: run.final(kind) for kind in ("member", *KINDS)}
    honest_min = min(final["member"] + final["honest"])
    riders = [r for kind in KINDS if kind != "honest" for r in final[kind]]
    return {
        "final": {kind: round(min(v), 3) for kind, v in final.items() if v},
        "honest_min": round(honest_min, 3),
        "riders_max": round(max(riders), 3),
        "separated": all(
            earned(r) == (run.kinds[p] in ("member", "honest"))
            for p, r in run.final_ratings.items()
        ),
        "separated_from_round": separated_by(run.ratings, run.kinds),
        "scoring_share": round(run.scoring_seconds / max(run.training_seconds / honest, 1e-9), 3),
        "evaluations_per_round": run.evaluations // rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--honest", type=int, default=4)
    parser.add_argument("--models", default="digits,gpt")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = {name: arm(name, args.rounds, args.honest) for name in args.models.split(",")}
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    rows = []
    for name, r in results.items():
        for kind, rating in r["final"].items():
            rows.append(
                [
                    name,
                    kind,
                    rating,
                    "below honest"
                    if kind not in ("member", "honest") and rating < r["honest_min"]
                    else "",
                ]
            )
    print_table(
        f"final ratings after {args.rounds} rounds (load {load})",
        ["arm", "kind", "rating", ""],
        rows,
    )
    print_table(
        "separation and cost",
        [
            "arm",
            "honest min",
            "riders max",
            "separated",
            "from round",
            "scoring share",
            "evals/round",
        ],
        [
            [
                n,
                r["honest_min"],
                r["riders_max"],
                r["separated"],
                r["separated_from_round"],
                r["scoring_share"],
                r["evaluations_per_round"],
            ]
            for n, r in results.items()
        ],
    )
    print_json({"rounds": args.rounds, "load": load, "arms": results})


if __name__ == "__main__":
    main()
