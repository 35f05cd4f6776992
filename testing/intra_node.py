"""One node of two ranks (swarm/diloco/member/intra_node.py) in a DiLoCo group, as real processes.

`python -m peertrain.testing.intra_node --rank R --world N --port P --out DIR` runs rank R: rank 0
is member "a" of a two-member group whose other member "b" lives in the same process (the
exchange is LocalGroup's list; the network is not what is tested here), ranks > 0 follow it.
Each writes what it ended with to DIR/rank<R>.pt. `reference_run` computes, in one process,
what the node must equal: member "a" with accumulation=N.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch
from peertrain.swarm.diloco.member.build import build_member, run_follower
from peertrain.swarm.diloco.member.flat import ParamLayout
from peertrain.swarm.diloco.member.intra_node import IntraNode
from peertrain.swarm.diloco.member.run_spec import DiLoCoSpec

from .diloco_group import LocalGroup

SPEC = DiLoCoSpec(
    model="mlp", dataset="digits", inner_steps=5, batch_size=16, num_shards=4, codec="fp32",
    lr=3e-3, warmup_steps=2,
)  # fmt: skip
STOPPED_AFTER = 2  # steps of the last, overtaken inner phase (of SPEC.inner_steps)


def lead(node: IntraNode, rounds: int) -> dict:
    a = build_member(SPEC, "a", intra=node)
    b = build_member(SPEC, "b")
    group = LocalGroup([a.member, b.member], names=["a", "b"])
    losses = [group.run_round()[0].inner.mean_loss for _ in range(rounds)]
    theta = a.member.global_params.clone()
    # then an inner phase the group overtakes after STOPPED_AFTER steps: every rank must stop
    # after the same step, or a follower's next all_reduce waits for a rank that left
    inner = a.member.inner
    stop_at = inner.step + STOPPED_AFTER
    stopped = inner.run(SPEC.inner_steps, stop=lambda: inner.step >= stop_at)
    inner.close()
    return {
        "theta": theta,
        "model": ParamLayout(inner.model).flatten(),
        "stopped_steps": stopped.steps,
        "losses": losses,
        "device": str(node.device),
    }


def follower(node: IntraNode) -> dict:
    rounds, model = run_follower(SPEC, node)
    return {"theta": ParamLayout(model).flatten(), "rounds": rounds, "device": str(node.device)}


def reference_run(world: int, rounds: int) -> torch.Tensor:
    """θ_global of member "a" after `rounds`, trained alone with accumulation=`world`."""
    a = build_member(dataclasses.replace(SPEC, accumulation=world), "a")
    b = build_member(SPEC, "b")
    group = LocalGroup([a.member, b.member], names=["a", "b"])
    for _ in range(rounds):
        group.run_round()
    return a.member.global_params


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--rank", "--world", "--port", "--rounds"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    node = IntraNode.join(rank=args.rank, world=args.world, port=args.port, device=args.device)
    try:
        result = lead(node, args.rounds) if node.leads else follower(node)
    finally:
        node.leave()
    torch.save(result, args.out / f"rank{args.rank}.pt")


if __name__ == "__main__":
    main()
