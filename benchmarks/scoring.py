"""What contribution scores cost and how well they separate honest work from free riding.

    .venv/bin/python benchmarks/scoring.py [--rounds 20] [--models digits,gpt]

A group of `--honest` counted members (the first scores, as an anchor does) and one free rider
of each kind on probation beside an honest newcomer, round after round with real inner steps
(testing/scoring_group.py): zero updates, copies of a counted member's update, replays of the
rider's own last update, random directions of an honest norm (cheap noise), and honest work on
a shard that is not the rider's. Arms: the digits MLP, and the byte-level text GPT.

Reported per arm: the final rating and fit of every kind (counted members: the lowest), whether
every counted member keeps its place, the honest newcomer earns one and no rider does, the
round from which every free rider's rating stays below every honest member's (work on another's
shard is told by its fit, not its rating), and the scorer's cost: seconds of scoring per round
against one member's seconds of inner steps (its share of that member's compute). Prints a
table, then, as the last line, one JSON object with the figures; the load average beside them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_json, print_table  # noqa: E402
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec  # noqa: E402
from peertrain.swarm.scoring.rating import collapsed, earned  # noqa: E402
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


FREE_RIDES = ("zero", "copy", "replay", "noise")  # told apart by their rating
HONEST = ("member", "honest")


def separated_by(ratings: list[dict[str, float]], kinds: dict[str, str]) -> int | None:
    """The first round from which every free rider's rating stays below every honest
    member's for good (work on another's shard is told apart by its fit, not its rating)."""
    first = None
    for round_, rated in enumerate(ratings):
        honest = [r for p, r in rated.items() if kinds[p] in HONEST]
        riders = [r for p, r in rated.items() if kinds[p] in FREE_RIDES]
        ok = honest and riders and max(riders) < min(honest)
        first = (first if first is not None else round_) if ok else None
    return first


def arm(name: str, rounds: int, honest: int) -> dict:
    spec = DiLoCoSpec(**ARMS[name], warmup_steps=5, num_shards=8)
    run = run_scored(spec, honest=honest, riders={k: 1 for k in KINDS}, rounds=rounds)
    by_kind: dict[str, list] = {}
    for peer, rating in run.final_ratings.items():
        by_kind.setdefault(run.kinds[peer], []).append(rating)
    honest_rated = [r for k in HONEST for r in by_kind.get(k, [])]
    riders = [r for k in FREE_RIDES for r in by_kind.get(k, [])]
    return {
        "final": {
            k: {
                "rating": round(min(r.rating for r in v), 3),
                "fit": round(min(r.fit for r in v), 3),
            }
            for k, v in by_kind.items()
        },
        "honest_min": round(min(r.rating for r in honest_rated), 3),
        "free_riders_max": round(max(r.rating for r in riders), 3),
        # counted members stay unless their rating collapses; a newcomer must earn its place
        "members_kept": sum(not collapsed(r) for r in by_kind.get("member", [])),
        "members": len(by_kind.get("member", [])),
        "newcomer_admitted": all(earned(r) for r in by_kind.get("honest", [])),
        "riders_admitted": [
            run.kinds[r.peer]
            for r in run.final_ratings.values()
            if earned(r) and run.kinds[r.peer] not in HONEST
        ],
        "free_riders_below_from_round": separated_by(run.ratings, run.kinds),
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
    rows = [
        [name, kind, f["rating"], f["fit"]]
        for name, r in results.items()
        for kind, f in r["final"].items()
    ]
    print_table(
        f"final ratings after {args.rounds} rounds, lowest of each kind (load {load})",
        ["arm", "kind", "rating", "fit"],
        rows,
    )
    header = ["arm", "members kept", "newcomer in", "riders in", "honest min", "free riders max"]
    header += ["free riders below from round", "scoring share", "evals/round"]
    print_table(
        "separation and cost",
        header,
        [
            [
                n,
                f"{r['members_kept']}/{r['members']}",
                r["newcomer_admitted"],
                ",".join(r["riders_admitted"]) or "none",
                r["honest_min"],
                r["free_riders_max"],
                r["free_riders_below_from_round"],
                r["scoring_share"],
                r["evaluations_per_round"],
            ]
            for n, r in results.items()
        ],
    )
    print_json({"rounds": args.rounds, "load": load, "arms": results})


if __name__ == "__main__":
    main()
