"""What a local DiLoCo swarm's rounds cost, from its members' own logs and statuses: the loss
against the tokens the group trained on, each round's time split, each member's throughput, and
its checkpoints.

Every round a member closes logs one `round_closed` event (swarm/diloco/group/driver.py) with its
eval loss, the updates it counted, and its split: `inner_s` (inner steps and encoding),
`outer_s` (aggregation and the outer step), `exchange_s` (the rest of the round's wall time: the
exchange, and waiting for the group and its agreement). A member's log outlives its restarts, so
a killed member's rounds are in it too; its status holds only its current life's totals.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from .swarm_events import log_events

SPLIT = ("inner_s", "exchange_s", "outer_s")


def rounds_report(swarm) -> dict[str, Any]:
    """`loss_curve`, `round_split`, `throughput` and `checkpoints` of the swarm's report."""
    spec = swarm.options.spec
    samples = int(spec.get("batch_size", 16)) * int(spec.get("accumulation", 1))
    steps = int(spec.get("inner_steps", 0))
    block = tokens_per_sample(spec)
    closed = [log_events(d.log_path, "round_closed") for d in swarm.daemons]
    return {
        "loss_curve": loss_curve(closed[0], samples * steps * (block or 1)),
        "curve_unit": "tokens" if block else "samples",
        "round_split": round_split(closed),
        "throughput": throughput(closed, samples * steps * (block or 1)),
        "checkpoints": checkpoints(swarm.statuses),
    }


def tokens_per_sample(spec: dict[str, Any]) -> int | None:
    """A training window's tokens (bytes of text) when the dataset is text; None otherwise."""
    from peertrain.swarm.data import TextDatasetConfig, TokenDatasetConfig

    config = {"text": TextDatasetConfig, "tokens": TokenDatasetConfig}.get(spec.get("dataset"))
    if config is None:
        return None
    block = (spec.get("dataset_settings") or {}).get("block_size")
    return int(block or config.__dataclass_fields__["block_size"].default)


def loss_curve(events: list[dict[str, Any]], per_update: int) -> list[dict[str, Any]]:
    """The creator's eval loss after each round against what the group had trained on by then:
    every update it counted is one member's `per_update` tokens (or samples). The creator is
    never the member `--kill-at` kills, so its log holds every round."""
    out, seen = [], 0
    for e in sorted(events, key=lambda e: e["round"]):
        seen += e.get("accepted", 0) * per_update
        out.append({"round": e["round"], "trained": seen, "loss": e.get("loss")})
    return out


def round_split(closed: list[list[dict[str, Any]]]) -> dict[str, float]:
    """The median seconds of each part of a round, over every round every member closed."""
    events = [e for member in closed for e in member if all(k in e for k in SPLIT)]
    if not events:
        return {}
    split = {k: round(median(e[k] for e in events), 3) for k in SPLIT}
    split["round_s"] = round(sum(split[k] for k in SPLIT), 3)
    return split


def throughput(closed: list[list[dict[str, Any]]], per_round: int) -> list[dict[str, Any]]:
    """Each member's tokens (or samples) per second: while it computed its inner steps, and
    over its rounds' whole wall time (what the group's waits leave of it)."""
    out = []
    for node, events in enumerate(closed):
        timed = [e for e in events if all(k in e for k in SPLIT)]
        inner = sum(e["inner_s"] for e in timed)
        wall = sum(e[k] for e in timed for k in SPLIT)
        out.append(
            {
                "node": node,
                "rounds": len(timed),
                "per_s_computing": round(len(timed) * per_round / inner, 1) if inner else None,
                "per_s": round(len(timed) * per_round / wall, 1) if wall else None,
            }
        )
    return out


def checkpoints(statuses: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Each member's checkpoints in its current life: how many, their mean write time, and
    the last one's size."""
    out = []
    for node, status in enumerate(statuses):
        timing = (((status or {}).get("run") or {}).get("progress") or {}).get("timing") or {}
        n = timing.get("checkpoints") or 0
        out.append(
            {
                "node": node,
                "written": n,
                "mean_s": round(timing["checkpoint_s"] / n, 3) if n else None,
                "mb": round(timing.get("checkpoint_bytes", 0) / (1 << 20), 1),
            }
        )
    return out
