"""What a local swarm with contribution scores reports: the anchor's ratings, honest against
hostile, and how many hostile members the anchor counted in each round it was seen in.

The anchor (node 0) publishes its ratings in its run status (`progress.scores`); the swarm knows
which of its daemons are hostile, so it can say what the ratings bought. Polled every status
round; bounded by the run's rounds.
"""

from __future__ import annotations

from typing import Any

MAX_ROUNDS = 4096


class ScoreWatch:
    def __init__(self) -> None:
        self.hostile_counted: dict[int, int] = {}  # round → most hostile members counted in it

    def saw(self, statuses: list[dict[str, Any] | None], honest: int) -> None:
        scores = _scores_of(statuses)
        run = statuses[0]["run"] if statuses and statuses[0] else None
        if not scores or not run or len(self.hostile_counted) >= MAX_ROUNDS:
            return
        hostile = {s["peer_id"] for s in statuses[honest:] if s}
        counted = len(hostile & set(scores["counted"]))
        round_ = int(run["round"])
        self.hostile_counted[round_] = max(self.hostile_counted.get(round_, 0), counted)

    def report(self, statuses: list[dict[str, Any] | None], honest: int) -> dict[str, Any]:
        scores = _scores_of(statuses)
        if not scores:
            return {}
        peers = [s["peer_id"] if s else None for s in statuses]
        ratings = scores["ratings"]

        def rated(nodes: range) -> list[float]:
            return [ratings[p]["rating"] for i in nodes if (p := peers[i]) in ratings]

        by_node = [
            {"node": i, "hostile": i >= honest, **ratings[p]}
            for i, p in enumerate(peers)
            if p in ratings
        ]
        return {
            "scores": {
                "by_node": by_node,
                "honest_ratings": rated(range(honest)),
                "hostile_ratings": rated(range(honest, len(peers))),
                "hostile_counted_by_round": dict(sorted(self.hostile_counted.items())),
                "flags": sorted({r["flag"] for r in ratings.values() if r["flag"]}),
                "anchor_scoring_seconds": scores.get("seconds"),
            }
        }


def _scores_of(statuses: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    run = statuses[0].get("run") if statuses and statuses[0] else None
    return ((run or {}).get("progress") or {}).get("scores")
